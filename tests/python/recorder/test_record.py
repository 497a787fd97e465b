"""Integration tests of the in-process recorder, on real scripts.

Every recorded program runs in a subprocess with a timeout: a deadlock fails the test
(the watchdog) instead of hanging the suite. Files are read back with
``tach._native.load``, which runs the full verification of the Rust reader first.

Run: see docs/recorder.md ("Tests"), e.g. ``tests/python/run.sh``.
"""

import collections
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import tach
from tach import _native

TIMEOUT = 90  # seconds; the watchdog for every recorded program

HAS_GIL, ON_CPU, UNKNOWN, GIL_REQUESTED, HAS_EXCEPTION, MAIN_THREAD = 1, 2, 4, 8, 16, 32

# CHROOT: the project's own chroot tool (scripts/cpython-chroot); inside the chroot it
# is absent.
from conftest import CHROOT, REPO, in_order, line_in_file  # noqa: E402


# ---------------------------------------------------------------------------- helpers


def write_script(tmp_path, text, name="script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def run_recorded(tmp_path, script, *options, out="out.tach", env=None, check=True, timeout=TIMEOUT):
    """Runs ``python -m tach run -o OUT OPTIONS script`` and loads the result."""
    out_path = tmp_path / out
    cmd = [sys.executable, "-m", "tach", "run", "-o", str(out_path), *options, str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc, _native.load(str(out_path))


def run_python(tmp_path, text, timeout=TIMEOUT, **kw):
    """Runs a Python program (which uses the tach API itself) under the watchdog."""
    script = write_script(tmp_path, text, name="prog.py")
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, cwd=tmp_path, **kw
    )


def stacks(data):
    """[(thread_id, status, [(file basename, funcname, lineno), ...innermost first])]."""
    frames = [(os.path.basename(f[0]), f[1], f[2]) for f in data["frames"]]
    return [(tid, status, [frames[i] for i in stack]) for tid, _, _, status, stack in data["samples"]]


def funcs(stack):
    return [f[1] for f in stack]


# Before 3.11 a code object has no co_qualname: a frame is named by co_name, as CPython's
# tracebacks named it then ("run", not "Thread.run").
HAS_QUALNAME = sys.version_info >= (3, 11)


def qualname(name):
    """`name` as this interpreter's frames are named."""
    return name if HAS_QUALNAME else name.rsplit(".", 1)[-1]


def check_header(data, mode="wall", features=(), gc=True):
    assert data["python_version"] == tuple(sys.version_info[:3])
    assert data["mode"] == mode
    assert sorted(data["features"]) == sorted(list(features) + (["gc"] if gc else []))
    assert data["stats"] is not None
    assert data["sample_count"] == len(data["samples"])


# ------------------------------------------------------------------- real workloads


CPU_RECURSION = """
    import time

    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)  # FIB

    def main():
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:
            fib(20)  # CALL

    main()
"""


def test_cpu_recursion_stacks_lines_and_header(tmp_path):
    script = write_script(tmp_path, CPU_RECURSION)
    proc, data = run_recorded(tmp_path, script)
    check_header(data)
    assert "samples" in proc.stderr and "Hz achieved" in proc.stderr and "out.tach" in proc.stderr
    assert "% of a CPU" in proc.stderr
    st = stacks(data)
    # 1.5 s at 1 kHz, less a sample per ms the VM stopped the sampler (stalled_sec).
    assert len(st) > 1000 - 1000 * stalled_sec(data), (len(st), stalled_sec(data))
    # Tight recursion calls and returns every few tens of nanoseconds: the reads that
    # race it are trimmed or taken again, not dropped (CPython 3.15's own sampler
    # drops ~37% of this workload's ticks).
    assert data["stats"]["error_rate"] < 5, data["stats"]
    fib_line, call_line = line_in_file(script, "# FIB"), line_in_file(script, "# CALL")
    in_fib = [s for _, _, s in st if s and s[0][1] == "fib"]
    assert len(in_fib) > 0.9 * len(st)
    # Callers are at the recursive call. A sample is read while the thread runs; frames
    # the thread left during the read are recognised and trimmed (docs/recorder.md), so
    # a torn stack is rare, not never.
    def well_formed(s):
        # innermost fib frames (the running one may still be on its RESUME instruction,
        # which carries the `def` line), callers at the recursive call, then main at
        # the call line, then the module.
        names = funcs(s)
        if "main" not in names:
            return False
        k = names.index("main")
        return (
            set(names[:k]) == {"fib"}
            and s[0][2] in (fib_line, fib_line - 1)
            and all(f[2] == fib_line for f in s[1:k])
            and s[k] == ("script.py", "main", call_line)
            and names[k + 1] == "<module>"
        )

    torn = [s for s in in_fib if not well_formed(s)]
    assert len(torn) < 0.01 * len(in_fib), torn[:3]
    # the recorder's own harness never shows
    assert not any(f[0] in ("__main__.py", "_record.py") for _, _, s in st for f in s)
    tids = {tid for tid, _, _ in st}
    assert tids == {proc_main_tid(data)}
    assert all(status & MAIN_THREAD and status & UNKNOWN for _, status, _ in st)
    # The main thread runs Python code nearly all the time: it holds the GIL.
    assert sum(1 for _, status, _ in st if status & HAS_GIL) > 0.9 * len(st)
    stats = data["stats"]
    assert 1.4 < stats["duration_sec"] < 5
    assert stats["error_rate"] is not None and stats["missed_samples"] is not None


def proc_main_tid(data):
    # The main thread is the one flagged MAIN_THREAD; its id is the process id.
    tids = {tid for tid, _, _, status, _ in data["samples"] if status & MAIN_THREAD}
    assert len(tids) == 1
    return tids.pop()


def stalled_sec(data, interval_us=1000):
    """Time lost to gaps of 20 intervals or more between consecutive ticks: this
    shared VM sometimes stops the sampler's thread for a few hundred ms, which says
    nothing about the recorder. A recorder that is slow throughout leaves no such gap."""
    ts = sorted({s[2] for s in data["samples"]})
    return sum(b - a - interval_us for a, b in zip(ts, ts[1:])
               if b - a >= 20 * interval_us) / 1e6


# A bare 1 kHz timer loop with the sampler's schedule: absolute deadlines, catching up
# by at most two ticks (sampler.rs, MAX_BACKLOG_TICKS). It runs in its own process
# beside a recording and prints the monotonic microsecond of every tick it took, so the
# test knows how many ticks this machine let a thread take in the recording's window.
CONTROL_TIMER = """
import sys, threading, time
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
interval = 1000
now_us = lambda: time.monotonic_ns() // 1000
ticks = []
nxt = now_us() + interval
deadline = now_us() + 60_000_000
while not stop.is_set():
    now = now_us()
    if now >= deadline:
        break
    if now < nxt:
        time.sleep((nxt - now) / 1e6)
        continue
    ticks.append(now)
    nxt += interval
    if now > nxt + 2 * interval:
        nxt += (now - nxt - 2 * interval) // interval * interval
print(" ".join(map(str, ticks)))
"""


def achieved_rates(tmp_path):
    """(recorder's rate, control timer's rate) over the same window, stalls left out."""
    control = subprocess.Popen(
        [sys.executable, "-c", CONTROL_TIMER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        script = write_script(tmp_path, "import time\ntime.sleep(2)\n")
        _, data = run_recorded(tmp_path, script)
    finally:
        out, _ = control.communicate("", timeout=TIMEOUT)
    stats = data["stats"]
    duration = stats["duration_sec"]
    rate = stats["sample_rate"] * duration / (duration - stalled_sec(data))
    ts = [s[2] for s in data["samples"]]
    first, last = min(ts), max(ts)
    ticks = [t for t in map(int, out.split()) if first <= t <= last]
    window = (last - first) / 1e6 - stalled_sec({"samples": [(0, 0, t) for t in ticks]})
    control_rate = len(ticks) / window if window > 0 else 0.0
    return rate, control_rate, data


@pytest.mark.front_end
def test_achieved_rate_is_within_ten_percent(tmp_path):
    """1 kHz is asked for; at least 90% of it must be delivered, or of what a bare timer
    loop beside the recording got when the machine gave less: on this shared VM a busy
    neighbour sometimes wakes every thread late for a second or more (the 3.15 run once
    reached 784 Hz with a 0.3 s stall left out). A recorder that is slow per tick still
    fails, since the control timer does no sampling work. Up to three tries: such a busy
    period passes, a slow recorder fails all three."""
    tries = []
    for attempt in range(3):
        attempt_dir = tmp_path / f"try{attempt}"
        attempt_dir.mkdir()
        rate, control_rate, data = achieved_rates(attempt_dir)
        tries.append((round(rate, 1), round(control_rate, 1), data["stats"]))
        if 0.9 * min(1000.0, control_rate) <= rate <= 1100:
            break
    else:
        pytest.fail(f"(recorder Hz, control timer Hz, stats) of each try: {tries}")
    ts = [s[2] for s in data["samples"]]
    assert ts == sorted(ts)
    assert data["start_time_us"] <= ts[0]


THREADS_MIXED = """
    import hashlib, os, tempfile, threading, time

    def cpu_worker(stop):
        x = 0
        while not stop.is_set():
            for i in range(20000):
                x += i * i % 7  # CPU
            hashlib.sha256(str(x).encode()).hexdigest()

    def sleeper(stop):
        while not stop.is_set():
            time.sleep(0.005)  # SLEEP

    def io_worker(stop):
        fd, path = tempfile.mkstemp()
        os.close(fd)
        try:
            while not stop.is_set():
                with open(path, "wb") as f:
                    f.write(os.urandom(64 * 1024))
                with open(path, "rb") as f:
                    f.read()
                time.sleep(0.001)
        finally:
            os.unlink(path)

    def mixed_worker(stop):
        def inner_cpu(n):
            return sum(i * i for i in range(n))
        while not stop.is_set():
            inner_cpu(50000)
            time.sleep(0.01)

    def main():
        stop = threading.Event()
        targets = [cpu_worker, sleeper, io_worker, mixed_worker] * 2
        threads = [threading.Thread(target=t, args=(stop,)) for t in targets]
        for t in threads:
            t.start()
        time.sleep(1.5)
        stop.set()
        for t in threads:
            t.join()

    main()
"""


def test_eight_threads_sleep_io_cpu(tmp_path):
    script = write_script(tmp_path, THREADS_MIXED)
    _, data = run_recorded(tmp_path, script, "-a")
    check_header(data, features=["all_threads"])
    st = stacks(data)
    by_thread = collections.defaultdict(list)
    for tid, status, s in st:
        by_thread[tid].append((status, s))
    assert len(by_thread) == 9
    main_tid = proc_main_tid(data)
    roles = {}
    for tid, samples in by_thread.items():
        names = collections.Counter(f for _, s in samples for f in set(funcs(s)))
        for role in ("cpu_worker", "sleeper", "io_worker", "mixed_worker"):
            if names[role] > 0.5 * len(samples):
                roles[tid] = role
        if tid != main_tid:
            assert all(not status & MAIN_THREAD for status, _ in samples)
            assert any(
                funcs(s)[-3:]
                == [qualname(n) for n in ("Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap")]
                for _, s in samples
            )
    assert sorted(collections.Counter(roles.values()).values()) == [2, 2, 2, 2]
    sleep_line = line_in_file(script, "# SLEEP")
    cpu_line = line_in_file(script, "# CPU")
    for tid, role in roles.items():
        samples = by_thread[tid]
        if role == "sleeper":
            asleep = [s for _, s in samples if s and s[0] == ("script.py", "sleeper", sleep_line)]
            assert len(asleep) > 0.8 * len(samples)
            # sleeping threads do not hold the GIL
            assert sum(1 for status, _ in samples if status & HAS_GIL) < 0.2 * len(samples)
        if role == "cpu_worker":
            assert any(s and s[0] == ("script.py", "cpu_worker", cpu_line) for _, s in samples)
            assert any(status & HAS_GIL for status, _ in samples)
        if role == "mixed_worker":
            inner = qualname("mixed_worker.<locals>.inner_cpu")
            assert any(funcs(s)[:3] == ["<genexpr>", inner, "mixed_worker"]
                       or funcs(s)[:2] == [inner, "mixed_worker"]
                       for _, s in samples)
    # at most one thread holds the GIL at any tick (threads are read one after the
    # other, so a hand-over between two reads can rarely show two holders)
    by_ts = collections.Counter(ts for tid, _, ts, status, _ in data["samples"] if status & HAS_GIL)
    assert sum(1 for n in by_ts.values() if n > 1) <= 0.01 * len(by_ts)


def test_recursion_deeper_than_1000_keeps_innermost_256(tmp_path):
    script = write_script(tmp_path, """
        import sys, time
        sys.setrecursionlimit(5000)

        def deep(n):
            if n == 0:
                t0 = time.monotonic()
                while time.monotonic() - t0 < 1.0:
                    pass  # BOTTOM
                return 0
            return deep(n - 1) + 1  # RECURSE

        deep(1500)
    """)
    _, data = run_recorded(tmp_path, script)
    st = stacks(data)
    bottom, recurse = line_in_file(script, "# BOTTOM"), line_in_file(script, "# RECURSE")
    # samples at the bottom of the recursion (not while it builds up or unwinds)
    deep_samples = [s for _, _, s in st if s and s[0][1] == "deep" and s[0][2] in (bottom, bottom - 1)]
    assert len(deep_samples) > 500
    for s in deep_samples:
        assert len(s) == 256
        assert all(f == ("script.py", "deep", recurse) for f in s[1:])


def test_generators_and_async(tmp_path):
    script = write_script(tmp_path, """
        import asyncio, time

        def numbers():
            for i in range(10**9):
                s = 0
                for j in range(2000):
                    s += j  # GEN
                yield s

        def consume(deadline):
            for v in numbers():
                if time.monotonic() > deadline:
                    return v

        async def cpu_task(n):
            for _ in range(n):
                s = 0
                for i in range(20000):
                    s += i  # ASYNC
                await asyncio.sleep(0)

        async def main():
            await asyncio.gather(cpu_task(40), cpu_task(40))

        consume(time.monotonic() + 0.8)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.8:
            asyncio.run(main())
    """)
    _, data = run_recorded(tmp_path, script)
    st = [s for _, _, s in stacks(data)]
    gen = [s for s in st if s and s[0] == ("script.py", "numbers", line_in_file(script, "# GEN"))]
    assert len(gen) > 200
    # (the same tolerance for torn stacks as the other stack checks)
    wrong = [s for s in gen if funcs(s)[:3] != ["numbers", "consume", "<module>"]]
    assert len(wrong) <= 0.02 * len(gen), wrong[:3]
    coro = [s for s in st if s and s[0] == ("script.py", "cpu_task", line_in_file(script, "# ASYNC"))]
    assert len(coro) > 200
    # the coroutine runs from the event loop, under asyncio.run
    for s in coro:
        names = funcs(s)
        assert qualname("BaseEventLoop._run_once") in names
        assert "<module>" in names


# A tree of tasks known by construction: main's TaskGroup runs mid-0 and mid-1, each
# gathers two leaf coroutines (wrapped in unnamed tasks), each awaiting a task named
# deepest-N that does the work; a task named timer only waits.
ASYNC_TREE = """
    import asyncio, sys, time

    def spin(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    async def deepest(end):
        while time.monotonic() < end:
            spin(0.002)
            await asyncio.sleep(0)

    async def leaf(i, end):
        await asyncio.create_task(deepest(end), name=f"deepest-{i}")

    async def mid(i, end):
        await asyncio.gather(*(leaf(10 * i + k, end) for k in range(2)))

    async def main(seconds):
        end = time.monotonic() + seconds
        async with asyncio.TaskGroup() as tg:
            for i in range(2):
                tg.create_task(mid(i, end), name=f"mid-{i}")
            tg.create_task(asyncio.sleep(seconds), name="timer")
"""


def task_chains(data):
    """[(task names root first, frames innermost first)] of every sample, by time."""
    frames = [(os.path.basename(f[0]), f[1], f[2]) for f in data["frames"]]
    out = []
    for _, _, when, _, stack in sorted(data["samples"], key=lambda s: s[2]):
        st = [frames[i] for i in stack]
        out.append((when, [f[1] for f in reversed(st) if f[0] == "<task>"], st))
    return out


def check_task_tree(data, mode):
    chains = task_chains(data)
    # Until the recorder finds asyncio's offsets (looked for every 50 ms while asyncio is
    # not imported), the loop's tasks are plain stacks: at most that long.
    first = next(when for when, names, _ in chains if names)
    early = [when for when, names, st in chains if "deepest" in funcs(st) and when < first]
    assert not early or early[-1] - early[0] < 100_000, early
    chains = [(names, st) for when, names, st in chains if when >= first]
    working = [(names, st) for names, st in chains if "deepest" in funcs(st)]
    assert len(working) > 200, chains[:5]
    seen, wrong = set(), []
    if not ASYNC_TREE_OK:
        # 3.11-3.13: the running task's frame over its coroutine's frames, and no task
        # above it (no version before 3.14 keeps who awaits a task); no sample of the
        # loop between tasks.
        for names, st in working:
            fs = funcs(st)
            if (len(names) == 1 and names[0].startswith("deepest-")
                    and st[fs.index("deepest") + 1] == ("<task>", names[0], None)
                    and st[-1] == ("<task>", names[0], None)):
                seen.add(names[0])
            else:
                wrong.append((names, st))
        assert len(wrong) <= 0.02 * len(working), wrong[:3]
        assert seen == {"deepest-0", "deepest-1", "deepest-10", "deepest-11"}, seen
        assert not any(qualname("BaseEventLoop._run_once") in funcs(st) for _, st in chains)
        return
    for names, st in working:
        # Task-1 > mid-i > (gather's unnamed task) > deepest-(10i+k), as built, and the
        # task's frame right above its coroutine's.
        fs = funcs(st)
        i = names[1].removeprefix("mid-") if len(names) == 4 else ""
        if (len(names) == 4 and names[0] == "Task-1" and i.isdigit() and names[2].startswith("Task-")
                and names[3] in (f"deepest-{10 * int(i)}", f"deepest-{10 * int(i) + 1}")
                and st[fs.index("deepest") + 1] == ("<task>", names[3], None)):
            seen.add(names[3])
        else:
            wrong.append((names, st))
    # A pause that times out on a loaded machine reads a running thread: the same
    # tolerance for torn samples as the other stack checks.
    assert len(wrong) <= 0.02 * len(working), wrong[:3]
    assert seen == {"deepest-0", "deepest-1", "deepest-10", "deepest-11"}, seen
    timer = sum(1 for names, _ in chains if names == ["Task-1", "timer"])
    if mode == "all":
        # Every task, waiting ones too, and nothing of the event loop's own frames.
        assert timer > 100, chains[:5]
        assert not any(qualname("BaseEventLoop._run_once") in funcs(st) for _, st in chains)
    else:
        # The timer runs only its first and last steps, microseconds: a sample of it is
        # rare, not one per tick.
        assert timer <= 5, timer


# 3.14+: the whole tree of tasks from asyncio's debug offsets; 3.11-3.13: the running
# task only, found from the stack, and `all` refused; before 3.11, refused.
ASYNC_TREE_OK = sys.version_info >= (3, 14)
ASYNC_RUNNING_OK = sys.version_info >= (3, 11)


@pytest.mark.parametrize("mode", ["running", "all"])
def test_async_aware_in_process(tmp_path, mode):
    """`python -m tach run --async-aware` and `tach.start(async_aware=True)` read their
    own process's tasks as `tach record --async-aware` does (3.14, 3.15: the tree; 3.11-
    3.13: the running task, `running` mode); where a version cannot, both refuse by name,
    saying which versions can."""
    script = write_script(tmp_path, textwrap.dedent(ASYNC_TREE) + "\nasyncio.run(main(2.0))\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tach", "run", "-o", str(tmp_path / "run.tach"), "--async-aware",
         "--async-mode", mode, str(script)],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path,
    )
    api = run_python(tmp_path, textwrap.dedent(ASYNC_TREE) + f"""
import tach
tach.start("api.tach", async_aware=True, async_mode={mode!r}, quiet=True)
try:
    asyncio.run(main(2.0))
finally:
    tach.stop()
""")
    if not ASYNC_RUNNING_OK or (mode == "all" and not ASYNC_TREE_OK):
        if ASYNC_RUNNING_OK:
            version = f"on CPython 3.{sys.version_info[1]} tach shows the running task only"
            needs = "--async-mode all needs CPython 3.14 or 3.15"
        else:
            version = f"CPython 3.{sys.version_info[1]} has neither"
            needs = "--async-aware needs CPython 3.11 or later"
        assert proc.returncode != 0 and version in proc.stderr, proc.stderr
        assert needs in proc.stderr, proc.stderr
        assert api.returncode != 0 and "RuntimeError" in api.stderr and version in api.stderr, api.stderr
        return
    assert proc.returncode == 0, proc.stderr
    assert api.returncode == 0, api.stderr
    for name in ("run.tach", "api.tach"):
        data = _native.load(str(tmp_path / name))
        check_header(data)
        check_task_tree(data, mode)


# zlib's deflate, json's encoder and libc's qsort calling back into Python through
# ctypes (the program of tests/data/native, the one test_native.py records from outside).
with open(os.path.join(REPO, "tests", "data", "native", "mixed.py")) as _f:
    NATIVE_MIXED = _f.read()


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64",
                    reason="native stacks are walked on x86-64 Linux only")
def test_native_in_process_mixes_native_and_python_frames(tmp_path):
    """`python -m tach run --native`: each sample is the thread's native stack, walked by
    the sampler thread while the signal's handler holds the thread, with the Python
    frames where the interpreter runs them: Python caller -> the module's C function ->
    zlib's own code, and the ctypes callback as Python -> libc's qsort -> Python."""
    script = write_script(tmp_path, NATIVE_MIXED)
    out = tmp_path / "native.tach"
    proc = subprocess.run([sys.executable, "-m", "tach", "run", "-o", str(out), "--native",
                           "--no-gc", "-r", "200", str(script), "2"],
                          capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = _native.load(str(out))
    assert "native:" in proc.stderr, proc.stderr
    check_header(data, features=["native"], gc=False)
    st = [list(reversed(funcs(s))) for _, _, s in stacks(data)]

    assert any(in_order(n, "main", "squeeze", "deflate") for n in st), st[:10]
    # Debian's CPython (the chroot's 3.13-3.15) builds the json accelerator into its
    # stripped interpreter, whose frames are hidden; pyenv's is a module with symbols.
    if "_json" not in sys.builtin_module_names:
        assert any(in_order(n, "main", "encode", "dumps", "encoder_listencode_obj")
                   for n in st), st[:10]
    assert any(in_order(n, "main", "qsort", "qsort_r", "compare") for n in st), st[:10]
    assert not any(in_order(n, "deflate", "squeeze") for n in st), st[:10]
    # The handler that holds the thread is not in its stack: the walk starts where the
    # signal interrupted it.
    assert not any(f in ("on_pause", "__restore_rt") for n in st for f in n), st[:10]
    # Under 1% on a quiet machine; 5% leaves room for a loaded CI machine.
    assert data["stats"]["error_rate"] < 5, data["stats"]


# Two named tasks calling into C (zlib's deflate, hashlib's SHA-256): the program
# test_async_stack.py records from outside with --native --async-aware.
with open(os.path.join(REPO, "tests", "data", "native", "tasks.py")) as _f:
    NATIVE_TASKS = _f.read()


def native_file(frame):
    """Whether a loaded frame is a native one (neither Python's nor synthetic)."""
    return not (frame[0].endswith(".py") or frame[0].startswith("<"))


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64",
                    reason="native stacks are walked on x86-64 Linux only")
def test_native_and_async_aware_in_process(tmp_path):
    """`python -m tach run --native --async-aware`, as from outside: each task's C calls
    have the task's frame right above its coroutine, and native frames under the Python
    function calling them (3.11-3.15); before 3.11 refused by name, as --async-aware
    alone is."""
    script = write_script(tmp_path, NATIVE_TASKS)
    out = tmp_path / "both.tach"
    proc = subprocess.run([sys.executable, "-m", "tach", "run", "-o", str(out), "--native",
                           "--async-aware", "-r", "200", str(script), "2"],
                          capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path)
    if not ASYNC_RUNNING_OK:
        assert proc.returncode != 0, proc.stderr
        assert "--async-aware needs CPython 3.11 or later" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    data = _native.load(str(out))
    assert "native:" in proc.stderr, proc.stderr
    assert "native" in data["features"], data["features"]
    samples = [list(reversed(s)) for _, _, s in stacks(data)]
    in_c = collections.Counter()
    wrong = []
    for st in samples:
        fs = funcs(st)
        for task, coro, func in [("squeeze", "squeeze", "compress"), ("hash", "hash_", "digest")]:
            if func not in fs or not native_file(st[-1]):
                continue
            # Root to leaf: the task's frame, its coroutine, ..., the function, then
            # native frames only. (The `squeeze` task is named as its coroutine.)
            at = fs.index(func)
            coro_at = next((i for i, f in enumerate(st) if f[1] == coro and f[0].endswith(".py")), 0)
            if (coro_at > 0 and st[coro_at - 1] == ("<task>", task, None)
                    and all(native_file(f) for f in st[at + 1:])):
                in_c[task] += 1
            else:
                wrong.append(st)
    total = len(samples)
    print(f"{proc.stderr.strip()}\nin C under each task: {dict(in_c)} of {total}; "
          f"{len(wrong)} not so")
    # zlib at level 9 takes most of the time: `hash` had 9-19% of the samples here.
    assert in_c["squeeze"] > 0.3 * total and in_c["hash"] > 0.02 * total, (in_c, total, samples[:3])
    # A pause that times out on a loaded machine reads a running thread: the same
    # tolerance for torn samples as the other stack checks.
    assert len(wrong) <= 0.02 * total, wrong[:3]
    assert data["stats"]["error_rate"] < 5, data["stats"]


# A thread that never runs Python: libc's pthread_create starting libc's own sleep(3)
# (a start routine takes one pointer-sized argument; sleep reads it as its seconds).
NATIVE_THREAD = """
import ctypes, ctypes.util, time, zlib
libc = ctypes.CDLL(ctypes.util.find_library("c"))
thread = ctypes.c_ulong()
start = ctypes.cast(libc.sleep, ctypes.c_void_p)
assert libc.pthread_create(ctypes.byref(thread), None, start, ctypes.c_void_p(2)) == 0
print("ready", flush=True)
DATA = bytes(range(256)) * 4000
end = time.time() + 1.5
while time.time() < end:
    zlib.compress(DATA, 9)
libc.pthread_join(thread, None)
"""


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64",
                    reason="native stacks are walked on x86-64 Linux only")
def test_native_in_process_all_threads_records_threads_without_python(tmp_path):
    """`python -m tach run -a --native`: a thread that runs no Python (a libc thread in
    sleep) is sampled by its native stack alone, and the sampler's own thread is not
    (two threads in all: the main one and the sleeping one)."""
    script = write_script(tmp_path, NATIVE_THREAD)
    proc, data = run_recorded(tmp_path, script, "-a", "--native", "-r", "200")
    assert "1 thread without Python" in proc.stderr, proc.stderr
    by_thread = collections.defaultdict(list)
    for tid, _, s in stacks(data):
        by_thread[tid].append(s)
    native_only = [tid for tid, st in by_thread.items()
                   if all(not any(file.endswith(".py") for file, _, _ in s) for s in st)]
    assert len(by_thread) == 2 and len(native_only) == 1, \
        {tid: [funcs(s) for s in st[:2]] for tid, st in by_thread.items()}
    sleeping = by_thread[native_only[0]]
    assert sum("sleep" in funcs(s) for s in sleeping) >= 0.8 * len(sleeping), \
        [funcs(s) for s in sleeping[:5]]
    assert data["stats"]["error_rate"] < 5, data["stats"]


def test_native_in_process_through_the_api(tmp_path):
    """`tach.start(native=True)`: the same options as `--native`, with the same checks."""
    out = tmp_path / "api.tach"
    prog = f"""
import sys, time, zlib, tach
DATA = bytes(range(256)) * 4000
def squeeze():
    zlib.compress(DATA, 9)
tach.start({str(out)!r}, native=True, rate=200, gc=False, quiet=True)
end = time.time() + 1.0
while time.time() < end:
    squeeze()
tach.stop()
try:
    tach.start({str(tmp_path / "x.tach")!r}, native=True, blocking=False)
except ValueError as e:
    print("refused:", e)
"""
    proc = run_python(tmp_path, prog)
    assert proc.returncode == 0, proc.stderr
    assert "refused: --native stops each thread" in proc.stdout, proc.stdout
    data = _native.load(str(out))
    check_header(data, features=["native"], gc=False)
    leaves = collections.Counter(funcs(s)[0] for _, _, s in stacks(data) if s)
    st = [list(reversed(funcs(s))) for _, _, s in stacks(data)]
    assert any("squeeze" in n and n.index("squeeze") < len(n) - 1 for n in st), leaves


@pytest.mark.front_end
@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64",
                    reason="native stacks are walked on x86-64 Linux only")
def test_native_in_process_without_a_free_signal_is_refused(tmp_path):
    """A program that handles every real-time signal tach could hold threads with gets
    an error saying so and what to do, not a recording of nothing but errors."""
    out = tmp_path / "none.tach"
    prog = f"""
import signal, tach
for sig in range(signal.SIGRTMIN + 2, signal.SIGRTMAX):
    signal.signal(sig, lambda *a: None)
try:
    tach.start({str(out)!r}, native=True, rate=200, gc=False, quiet=True)
except Exception as e:
    print("refused:", type(e).__name__, e)
else:
    print("started")
"""
    proc = run_python(tmp_path, prog)
    assert proc.returncode == 0, proc.stderr
    assert "refused:" in proc.stdout and "free real-time signal" in proc.stdout \
        and "tach record --native --pid" in proc.stdout, proc.stdout + proc.stderr
    assert not out.exists()


def test_exceptions_and_exception_mode(tmp_path):
    script = write_script(tmp_path, """
        import time

        def fail(n):
            if n == 0:
                raise ValueError("boom")
            return fail(n - 1)

        def handler():
            try:
                fail(20)
            except ValueError:
                s = 0
                for i in range(3000):
                    s += i  # HANDLING
                return s

        def main():
            t0 = time.monotonic()
            while time.monotonic() - t0 < 1.5:
                handler()
                s = 0
                for i in range(3000):
                    s += i  # CALM

        main()
    """)
    _, wall = run_recorded(tmp_path, script, out="wall.tach")
    handling, calm = line_in_file(script, "# HANDLING"), line_in_file(script, "# CALM")
    # The status is read just before the stack, so a transition can fall in between.
    c = collections.Counter()
    for _, status, s in stacks(wall):
        if s and s[0][2] in (handling, calm):
            c[(s[0][2], bool(status & HAS_EXCEPTION))] += 1
    assert c[(handling, True)] > 0.95 * (c[(handling, True)] + c[(handling, False)]), c
    assert c[(calm, False)] > 0.95 * (c[(calm, True)] + c[(calm, False)]), c
    _, exc = run_recorded(tmp_path, script, "--mode", "exception", out="exc.tach")
    check_header(exc, mode="exception")
    st = stacks(exc)
    assert len(st) > 100
    assert all(status & HAS_EXCEPTION for _, status, _ in st)
    assert sum(1 for _, _, s in st if s and s[0][2] == calm) < 0.02 * len(st)
    # the except block: its loop line and its body
    assert sum(1 for _, _, s in st if s and s[0][2] in (handling - 1, handling)) > 0.8 * len(st)


def test_callbacks_from_c_sorted_key(tmp_path):
    script = write_script(tmp_path, """
        import time

        def key(x):
            s = 0
            for i in range(300):
                s += i * x  # KEY
            return s % 1000

        def main():
            t0 = time.monotonic()
            while time.monotonic() - t0 < 1.2:
                sorted(range(300), key=key)  # SORT

        main()
    """)
    _, data = run_recorded(tmp_path, script)
    key_line, sort_line = line_in_file(script, "# KEY"), line_in_file(script, "# SORT")
    st = [s for _, _, s in stacks(data)]
    in_key = [s for s in st if s and s[0] == ("script.py", "key", key_line)]
    assert len(in_key) > 0.6 * len(st)
    # sorted() is C: the key function's caller is main, at the sorted() line (but for
    # the rare stack torn by a call or return during the read: one in
    # ~800 failed an all() check on 3.13 in CI).
    wrong = [s for s in in_key if s[1] != ("script.py", "main", sort_line)]
    assert len(wrong) <= 0.02 * len(in_key), wrong[:3]


def test_accuracy_three_to_one(tmp_path):
    # heavy() and light() burn 3 ms and 1 ms of CPU time per call. The script also logs
    # the wall-clock time each call really took: on a busy machine preemption stretches
    # calls, so the recorder is checked against that truth (within 2 points), and the
    # truth against the intended 3:1 split.
    script = write_script(tmp_path, """
        import json, time

        def spin(seconds):
            t0 = time.thread_time()
            while time.thread_time() - t0 < seconds:
                pass

        spent = {"heavy": 0, "light": 0}

        def heavy():
            spin(0.003)

        def light():
            spin(0.001)

        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:
            a = time.perf_counter()
            heavy()
            b = time.perf_counter()
            light()
            spent["heavy"] += b - a
            spent["light"] += time.perf_counter() - b
        json.dump(spent, open("truth.json", "w"))
    """)
    _, data = run_recorded(tmp_path, script)
    import json

    truth = json.loads((tmp_path / "truth.json").read_text())
    true_pct = 100 * truth["heavy"] / (truth["heavy"] + truth["light"])
    c = collections.Counter()
    for _, _, s in stacks(data):
        names = funcs(s)
        for f in ("heavy", "light"):
            if f in names:
                c[f] += 1
    total = c["heavy"] + c["light"]
    assert total > 1000
    pct = 100 * c["heavy"] / total
    assert abs(pct - true_pct) <= 2, (c, true_pct)
    # Loose: on an idle machine the split is 75%, but preemption on a busy one bends the
    # workload itself (the recorder is held to the measured truth above).
    assert abs(true_pct - 75) <= 20, true_pct


def test_modes_cpu_and_gil(tmp_path):
    script = write_script(tmp_path, THREADS_MIXED)
    _, cpu = run_recorded(tmp_path, script, "-a", "--mode", "cpu", out="cpu.tach")
    check_header(cpu, mode="cpu", features=["all_threads"])
    st = stacks(cpu)
    assert st and all(status & ON_CPU and not status & UNKNOWN for _, status, _ in st)
    # The two sleeping threads are running (or runnable, waiting for a CPU: also "R"
    # in /proc) only for moments: far fewer samples than ticks. (How few depends on
    # the load of the machine.)
    sleep_line = line_in_file(script, "# SLEEP")
    asleep = sum(1 for _, _, s in st if s and s[0] == ("script.py", "sleeper", sleep_line))
    ticks = cpu["stats"]["sample_rate"] * cpu["stats"]["duration_sec"]
    assert asleep < 0.5 * 2 * ticks, (asleep, ticks)
    assert any("cpu_worker" in funcs(s) for _, _, s in st)
    _, gil = run_recorded(tmp_path, script, "-a", "--mode", "gil", out="gil.tach")
    check_header(gil, mode="gil", features=["all_threads"])
    st = stacks(gil)
    assert st and all(status & HAS_GIL for _, status, _ in st)
    by_ts = collections.Counter(ts for _, _, ts, _, _ in gil["samples"])
    assert sum(1 for n in by_ts.values() if n > 1) <= 0.01 * len(by_ts)


def test_opcodes(tmp_path):
    import dis

    script = write_script(tmp_path, CPU_RECURSION)
    if sys.version_info < (3, 11):
        # No instruction tables before 3.11: refused before the program runs, by name.
        cmd = [sys.executable, "-m", "tach", "run", "--opcodes", "-o", str(tmp_path / "o.tach"), str(script)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        v = "%d.%d" % sys.version_info[:2]
        assert f"opcodes cannot be recorded on CPython {v}" in proc.stderr, proc.stderr
        return
    _, data = run_recorded(tmp_path, script, "--opcodes", "--compression", "none")
    check_header(data, features=["opcodes"])
    assert data["compression"] == "none"
    # Every frame of every sample has a base opcode (but for the rare torn read, whose
    # instruction pointer may point anywhere).
    occ = collections.Counter(data["frames"][i][6] for *_, stack in data["samples"] for i in stack)
    base = set(dis.opmap.values())
    good = sum(n for op, n in occ.items() if op in base)
    assert good > 0.99 * sum(occ.values()), occ
    # callers sit on a call instruction
    call_ops = {dis.opmap[n] for n in ("CALL", "PRECALL", "CALL_FUNCTION_EX") if n in dis.opmap}
    # (but for the rare stack torn by a return in the middle of the read)
    outer = collections.Counter(data["frames"][i][6] for *_, stack in data["samples"] for i in stack[1:]
                                if data["frames"][i][1] in ("main", "fib"))
    on_call = sum(n for op, n in outer.items() if op in call_ops)
    assert on_call > 0.99 * sum(outer.values()), {dis.opname[o]: n for o, n in outer.items()}
    inner = collections.Counter(data["frames"][stack[0]][6] for *_, stack in data["samples"] if stack)
    assert dis.opmap["BINARY_OP"] in inner and dis.opmap["COMPARE_OP"] in inner


def test_locations_match_co_positions(tmp_path):
    # Every recorded frame's location is one the code object itself reports.
    script = write_script(tmp_path, CPU_RECURSION)
    _, data = run_recorded(tmp_path, script)
    code = compile(script.read_text(), "script.py", "exec")
    positions = {}
    for c in [code] + [k for k in code.co_consts if hasattr(k, "co_lines")]:
        if HAS_QUALNAME:
            positions[c.co_name] = set(c.co_positions())
        else:
            # 3.10: lines only (no columns, no end line); a frame that has not run its
            # first instruction yet is on co_firstlineno, as CPython's f_lineno says.
            positions[c.co_name] = {line for _, _, line in c.co_lines()} | {c.co_firstlineno}
    for f in data["frames"]:
        if os.path.basename(f[0]) == "script.py":
            where = tuple(f[2:6]) if HAS_QUALNAME else f[2]
            assert where in positions[f[1].split(".")[-1]], f


# ------------------------------------------------------------------------ robustness


def test_thousand_short_lived_threads(tmp_path):
    script = write_script(tmp_path, """
        import threading

        def work(i):
            s = 0
            for j in range(2000):
                s += j * i  # WORK
            return s

        for batch in range(100):
            ts = [threading.Thread(target=work, args=(i,)) for i in range(10)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        print("done")
    """)
    proc, data = run_recorded(tmp_path, script, "-a", "-r", "5000")
    assert "done" in proc.stdout
    assert data["stats"]["error_rate"] < 50
    # no garbage: every sampled frame is from this script, threading or the runtime
    for f in data["frames"]:
        assert f[1] and f[0]


GC_STRESS = """
    import gc, time

    class Node:
        def __init__(self, other=None):
            self.other = other

    # a large heap of tracked objects, so that each collection takes a while
    keep = [Node(Node()) for _ in range(200000)]
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < 1.5:
        ns = {}
        exec(f"def temp_{n % 50}(k):\\n    s = 0\\n    for i in range(k):\\n        s += i\\n    return s\\n", ns)
        ns[f"temp_{n % 50}"](2000)
        del ns
        n += 1
        if n % 100 == 0:
            gc.collect()  # COLLECT
    print("done", n)
"""


def test_gc_stress_with_execd_functions(tmp_path):
    script = write_script(tmp_path, GC_STRESS)
    proc, data = run_recorded(tmp_path, script, "-r", "5000")
    assert "done" in proc.stdout, (proc.stdout, proc.stderr)
    check_header(data)
    names = {f[1] for f in data["frames"]}
    assert any(n.startswith("temp_") for n in names), names
    # a temp_N frame always carries the <string> file of exec
    temps = [f for f in data["frames"] if f[1].startswith("temp_")]
    assert all(f[0] == "<string>" for f in temps), temps
    # collections show as a <GC> frame, on top of the code that triggered them
    gc_frames = [f for f in data["frames"] if f[:2] == ("~", "<GC>")]
    assert len(gc_frames) == 1 and gc_frames[0][2:] == (None,) * 5, gc_frames
    collect = line_in_file(script, "# COLLECT")
    in_gc = [s for _, _, s in stacks(data) if s and s[0][1] == "<GC>"]
    at_collect = sum(1 for s in in_gc if s[1] == ("script.py", "<module>", collect))
    callers = collections.Counter(s[1] for s in in_gc)
    print(f"{len(in_gc)} samples in <GC>, {at_collect} over the COLLECT line; callers "
          f"{callers.most_common(4)}", file=sys.stderr)
    assert len(in_gc) > 20, callers
    assert at_collect > 0.5 * len(in_gc), callers
    _, nogc = run_recorded(tmp_path, script, "--no-gc", out="nogc.tach")
    check_header(nogc, gc=False)
    assert not any(f[1] == "<GC>" for f in nogc["frames"])


def test_fork_child_runs_on_unharmed(tmp_path):
    script = write_script(tmp_path, """
        import os, time

        def busy(seconds):
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                pass

        busy(0.3)
        pid = os.fork()
        if pid == 0:
            busy(0.3)
            print("child ok", flush=True)
            os._exit(7)
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status))
        busy(0.3)
    """)
    proc, data = run_recorded(tmp_path, script)
    assert "child ok" in proc.stdout
    assert "child exit 7" in proc.stdout
    assert len(data["samples"]) > 500


def test_fork_child_exits_normally_without_touching_the_file(tmp_path):
    script = write_script(tmp_path, """
        import os, sys, time
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.3:
            pass
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # runs atexit in the child
        os.waitpid(pid, 0)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.3:
            pass
    """)
    proc, data = run_recorded(tmp_path, script)
    assert proc.stderr.count("samples in") == 1  # only the parent reports
    assert len(data["samples"]) > 300


def test_stop_start_cycles_and_api(tmp_path):
    proc = run_python(tmp_path, """
        import time, tach

        def spin(s):
            t0 = time.monotonic()
            while time.monotonic() - t0 < s:
                pass

        total = 0
        for i in range(20):
            tach.start(f"cycle{i}.tach", quiet=True)
            spin(0.05)
            st = tach.stop()
            assert st["error"] is None, st
            # the sampler thread's own CPU time: more than nothing, less than the cycle
            assert 0 < st["sampler_cpu_sec"] < st["duration_sec"] + 0.01, st
            total += st["samples"]
        # (a loaded machine may starve one short cycle's sampler, not all of them)
        assert total > 200, total
        assert tach.stop() is None
        assert not tach.is_running()

        tach.start("twice.tach", quiet=True)
        try:
            tach.start("again.tach")
        except RuntimeError as e:
            assert "already recording" in str(e)
        else:
            raise AssertionError("second start accepted")
        tach.stop()

        with tach.profile("ctx.tach", rate=500, quiet=True) as p:
            spin(0.2)
        assert p.stats["samples"] > 50

        @tach.profile("deco.tach", all_threads=True, quiet=True)
        def f():
            spin(0.2)
            return 42
        assert f() == 42

        # Refused by the code that checks `tach record`'s flags, with its messages.
        for kwargs, says in [
            (dict(mode="bogus"), "unknown mode 'bogus': use wall, cpu, gil or exception"),
            (dict(rate=0), "the rate must be a positive number of samples per second, not 0"),
            (dict(rate=float("nan")), "the rate must be a positive number"),
            (dict(interval_us=0), "interval_us must be at least 1"),
            (dict(compression="lz4"), "unknown compression 'lz4': use auto, zstd or none"),
            (dict(duration=-1), "the duration must be a positive number of seconds"),
        ]:
            try:
                tach.start("x.tach", **kwargs)
            except ValueError as e:
                assert says in str(e), (kwargs, str(e))
            else:
                raise AssertionError(f"{kwargs} accepted")
        assert not tach.is_running()
        with tach.profile("interval.tach", interval_us=2500, quiet=True):
            spin(0.05)
        try:
            tach.start("/nonexistent/dir/x.tach")
        except RuntimeError:
            pass
        else:
            raise AssertionError("bad path accepted")
        tach.start("dur.tach", duration=0.1, quiet=True)
        spin(0.3)
        assert not tach.is_running()
        print("api ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert "api ok" in proc.stdout
    for i in range(20):
        _native.load(str(tmp_path / f"cycle{i}.tach"))  # verifies
    for name in ("ctx", "deco", "dur"):
        data = _native.load(str(tmp_path / f"{name}.tach"))
        assert data["samples"]
    assert _native.load(str(tmp_path / "deco.tach"))["features"] == ["all_threads", "gc"]
    assert _native.load(str(tmp_path / "ctx.tach"))["interval_us"] == 2000
    assert _native.load(str(tmp_path / "interval.tach"))["interval_us"] == 2500


# A bad option as `tach record` flags, as `python -m tach run` flags and as tach.start()
# keywords: one definition (record::options::RecordSpec), one message.
BAD_OPTIONS = [
    (["--mode", "bogus"], dict(mode="bogus"), "unknown mode 'bogus': use wall, cpu, gil or exception"),
    (["--compression", "lz4"], dict(compression="lz4"), "unknown compression 'lz4': use auto, zstd or none"),
    (["-r", "0"], dict(rate=0), "the rate must be a positive number of samples per second, not 0"),
    (["-d", "0"], dict(duration=0), "the duration must be a positive number of seconds, not 0"),
]


@pytest.mark.front_end
@pytest.mark.parametrize("flags,kwargs,says", BAD_OPTIONS, ids=lambda v: str(v))
def test_a_bad_option_says_the_same_everywhere(tmp_path, flags, kwargs, says):
    script = write_script(tmp_path, "print('ran')\n")
    # `tach record` (the package's `tach` command runs the Rust command line), from
    # outside and --in-process; then `python -m tach run`.
    tach_cli = [sys.executable, "-c", "import sys, tach._cli; sys.exit(tach._cli.main(sys.argv))"]
    for cmd in (
        [*tach_cli, "record", *flags, "--", sys.executable, str(script)],
        [*tach_cli, "record", "--in-process", *flags, "--", sys.executable, str(script)],
        [sys.executable, "-m", "tach", "run", *flags, str(script)],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path)
        assert proc.returncode == 2, (cmd, proc.stderr)
        assert says in proc.stderr, (cmd, proc.stderr)
        assert "ran" not in proc.stdout, cmd
    with pytest.raises(ValueError) as e:
        tach.start(tmp_path / "x.tach", **kwargs)
    assert says in str(e.value)
    assert not tach.is_running()


@pytest.mark.front_end
def test_python_m_tach_help_is_the_clap_definition(tmp_path):
    """`python -m tach run --help` lists tach record's recording options."""
    proc = subprocess.run([sys.executable, "-m", "tach", "run", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    record = subprocess.run(
        [sys.executable, "-c", "import sys, tach._cli; sys.exit(tach._cli.main(sys.argv))", "record", "--help"],
        capture_output=True, text=True,
    )
    for flag in ("--output", "--rate", "--mode", "--all-threads", "--opcodes", "--no-gc", "--blocking",
                 "--no-blocking", "--compression", "--duration"):
        assert flag in proc.stdout and flag in record.stdout, flag
    assert "[possible values: auto, zstd, none]" in proc.stdout and "- exception:" in proc.stdout
    # No program: clap's usage error (2).
    proc = subprocess.run([sys.executable, "-m", "tach", "run", "-r", "10"], capture_output=True, text=True)
    assert proc.returncode == 2 and "SCRIPT" in proc.stderr, proc.stderr


@pytest.mark.front_end
def test_in_process_passes_the_options_as_written(tmp_path):
    """`tach record --in-process` runs `python -m tach run` with its options as given."""
    script = write_script(tmp_path, CPU_RECURSION)
    out = tmp_path / "inproc.tach"
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, tach._cli; sys.exit(tach._cli.main(sys.argv))", "record",
         "--in-process", "-o", str(out), "-r", "500", "--mode", "cpu", "-a", "--no-gc",
         "--", sys.executable, str(script)],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    data = _native.load(str(out))
    assert data["interval_us"] == 2000
    check_header(data, mode="cpu", features=["all_threads"], gc=False)


def test_blocking_pauses_the_gil_holder_and_no_blocking_does_not(tmp_path):
    """By default (up to 1 kHz) each tick pauses the thread that holds the GIL while it
    reads the stacks; blocking=False (--no-blocking) never pauses; above 1 kHz the
    default is not to pause, and blocking=True (--blocking) pauses there too."""
    proc = run_python(tmp_path, """
        import time, tach

        def spin(s):
            t0 = time.monotonic()
            while time.monotonic() - t0 < s:
                pass

        with tach.profile("blocking.tach", quiet=True) as p:
            spin(0.5)
        st = p.stats
        assert st["paused_ticks"] > 0.5 * st["ticks"], st
        with tach.profile("running.tach", blocking=False, quiet=True) as p:
            spin(0.5)
        assert p.stats["paused_ticks"] == 0 and p.stats["pause_timeouts"] == 0, p.stats
        with tach.profile("fast.tach", rate=4000, quiet=True) as p:
            spin(0.3)
        assert p.stats["paused_ticks"] == 0, p.stats
        with tach.profile("fast_blocking.tach", rate=4000, blocking=True, quiet=True) as p:
            spin(0.3)
        assert p.stats["paused_ticks"] > 0.5 * p.stats["ticks"], p.stats
        print("blocking ok", st["paused_ticks"], st["ticks"])
    """)
    assert proc.returncode == 0, proc.stderr
    assert "blocking ok" in proc.stdout
    for name in ("blocking", "running", "fast", "fast_blocking"):
        assert _native.load(str(tmp_path / f"{name}.tach"))["samples"]


def test_no_deadlock_under_gil_heavy_work(tmp_path):
    # The watchdog: the subprocess timeout fails the test if anything hangs.
    proc = run_python(tmp_path, """
        import tach, threading
        tach.start("gil.tach", rate=10000, all_threads=True, quiet=True)
        def churn():
            for _ in range(100000):
                s = "x" * 100
                s.upper()
                import sys
        ts = [threading.Thread(target=churn) for _ in range(4)]
        for t in ts: t.start()
        for t in ts: t.join()
        print(tach.stop()["samples"] > 0)
    """, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "True" in proc.stdout


FINALIZE = """
    import os, signal, sys, time

    def spin(s):
        t0 = time.monotonic()
        while time.monotonic() - t0 < s:
            pass

    spin(0.3)
    how = sys.argv[1]
    if how == "exit":
        sys.exit(3)
    if how == "raise":
        raise RuntimeError("uncaught")
    if how == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    if how == "sigint":
        # Python's Ctrl-C handler even if this process inherited SIGINT ignored (a
        # test run started in the background by a non-interactive shell).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGINT)
    spin(5)
"""


@pytest.mark.parametrize("how,code", [("exit", 3), ("raise", 1), ("sigterm", 128 + 15), ("sigint", None)])
def test_file_is_finalized_on_exit_paths(tmp_path, how, code):
    script = write_script(tmp_path, FINALIZE)
    out = tmp_path / "out.tach"
    proc = subprocess.run(
        [sys.executable, "-m", "tach", "run", "-o", str(out), str(script), how],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path,
    )
    if code is not None:
        assert proc.returncode == code, proc.stderr
    else:
        assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr
    data = _native.load(str(out))
    assert 20 < len(data["samples"]) < 3000  # 0.3 s at 1 kHz, on a possibly busy machine
    assert data["stats"]["duration_sec"] < 4


def test_api_finalizes_at_interpreter_exit(tmp_path):
    proc = run_python(tmp_path, """
        import tach, time
        tach.start("atexit.tach")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.3:
            pass
        # no stop(): atexit finishes the file
    """)
    assert proc.returncode == 0, proc.stderr
    assert "samples in" in proc.stderr
    assert len(_native.load(str(tmp_path / "atexit.tach"))["samples"]) > 100


def test_module_mode(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(textwrap.dedent("""
        import sys, time
        def work():
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.5:
                pass
        work()
        print("args", sys.argv[1:])
    """))
    out = tmp_path / "m.tach"
    proc = subprocess.run(
        [sys.executable, "-m", "tach", "run", "-o", str(out), "-m", "mypkg", "a", "-q", "-o", "x"],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    # options after the module are the module's, not tach's
    assert "args ['a', '-q', '-o', 'x']" in proc.stdout
    assert "samples in" in proc.stderr
    data = _native.load(str(out))
    assert any(f[1] == "work" and f[0].endswith("__main__.py") for f in data["frames"])


# -------------------------------------------------------------------------- interop


def collapsed(data):
    """CPython's `replay --collapsed` rendering, from the decoded file."""
    frames = data["frames"]
    counts = collections.Counter()
    for tid, _, _, _, stack in data["samples"]:
        parts = []
        for i in reversed(stack):
            filename, funcname, lineno = frames[i][0], frames[i][1], frames[i][2]
            if os.path.basename(filename) == "_sync_coordinator.py":
                continue
            if filename == "~" and (lineno in (0, None)):
                parts.append(funcname)
            else:
                parts.append(f"{os.path.basename(filename)}:{funcname}:{lineno if lineno is not None else 0}")
        if parts:
            counts[f"tid:{tid};" + ";".join(parts)] += 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def replay_command():
    """How to run CPython 3.15's `profiling.sampling replay`: this interpreter if it is
    3.15, else through the chroot (which only sees /work)."""
    if sys.version_info >= (3, 15):
        return [sys.executable]
    if os.path.exists(CHROOT) and subprocess.run([CHROOT, "status"], capture_output=True).returncode == 0:
        return [CHROOT, "run", "--", "python3.15"]
    return None


@pytest.mark.skipif(replay_command() is None, reason="no CPython 3.15 here")
@pytest.mark.parametrize("options", [(), ("-a", "--compression", "none"), ("--opcodes",), ("-a", "--mode", "gil")])
def test_cpython_315_replay_reads_our_files(tmp_path, options):
    if "--opcodes" in options and sys.version_info < (3, 11):
        pytest.skip("no opcodes before 3.11 (test_opcodes checks the refusal)")
    cmd = replay_command()
    if cmd[0] == CHROOT and not str(tmp_path).startswith(REPO + os.sep):
        pytest.skip("the chroot only sees the checkout")
    script = write_script(tmp_path, THREADS_MIXED)
    _, data = run_recorded(tmp_path, script, *options)
    out = tmp_path / "replay.txt"
    proc = subprocess.run(
        [*cmd, "-m", "profiling.sampling", "replay", "--collapsed", "-o", str(out), str(tmp_path / "out.tach")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    theirs = []
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        theirs.append((stack, int(count)))
    assert theirs == collapsed(data)
    assert sum(n for _, n in theirs) == sum(1 for s in data["samples"] if s[4])


# ---------------------------------------------------------------------- crash safety

CRASHING = """
import ctypes, os, sys, threading, time
from tach import _native

how, after = sys.argv[1], float(sys.argv[2])

def leaf(n):
    x = 0
    for i in range(n):
        x += i
    return x

def mid(n):
    return leaf(n)

def top(n):
    return mid(n) if n % 2 else leaf(n)

def say(*words):
    # One write(2) per line: print() writes a line's words and its newline separately, so
    # the exit thread's "crash" line could interleave with the main thread's "progress".
    os.write(1, (" ".join(map(str, words)) + "\\n").encode())

def crash():
    say("crash", time.monotonic())
    if how == "segfault":
        ctypes.string_at(0)
    elif how == "abort":
        os.abort()

if how == "exit_thread":
    def exit_later():
        time.sleep(after)
        say("crash", time.monotonic())
        os._exit(1)
    threading.Thread(target=exit_later).start()

t0 = time.monotonic()
next_report = t0
i = 0
while True:
    i += 1
    top(1000 + i % 7)
    now = time.monotonic()
    if now >= next_report:
        # The recorder's own count of samples written, and when.
        say("progress", now, _native.samples_written())
        next_report = now + 0.05
    if how in ("segfault", "abort") and now - t0 >= after:
        crash()
"""


def tach_cli(*args):
    """Runs the `tach` command line (the Rust CLI, through the package) in a subprocess."""
    code = "import sys; from tach._cli import main; sys.exit(main(['tach', *sys.argv[1:]]))"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT)


@pytest.mark.front_end
@pytest.mark.parametrize("how,returncode", [
    ("sigkill", -signal.SIGKILL),
    ("segfault", -signal.SIGSEGV),
    ("exit_thread", 1),
    ("abort", -signal.SIGABRT),
])
def test_a_killed_recording_is_recovered(tmp_path, how, returncode):
    """A recording whose process dies without running any finaliser keeps its samples in
    OUT.tach.journal; `tach recover` turns it into a file that CPython 3.15 replays."""
    import random

    script = write_script(tmp_path, CRASHING)
    out = tmp_path / "out.tach"
    after = random.uniform(1.5, 3.0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tach", "run", "-o", str(out), str(script), how, f"{after:.3f}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )
    try:
        if how == "sigkill":
            first = proc.stdout.readline()
            assert first.startswith("progress"), first + proc.stderr.read()
            time.sleep(after)
            killed_at = time.monotonic()
            proc.send_signal(signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    if how == "sigkill":
        stdout = first + stdout
    else:
        crash_lines = [ln for ln in stdout.splitlines() if ln.startswith("crash")]
        assert crash_lines, stdout + stderr
        killed_at = float(crash_lines[-1].split()[1])
    assert proc.returncode == returncode, stderr
    progress = [(float(t), int(n)) for _, t, n in (ln.split() for ln in stdout.splitlines() if ln.startswith("progress"))]

    # What is left: an unfinished file and its journal; both say how to recover.
    journal = tmp_path / "out.tach.journal"
    assert journal.exists(), sorted(os.listdir(tmp_path))
    v = tach_cli("verify", out)
    assert v.returncode == 1 and f"tach recover {journal}" in v.stdout, v.stdout + v.stderr
    i = tach_cli("info", journal)
    assert i.returncode == 1 and "crash journal" in i.stderr and "tach recover" in i.stderr, i.stderr

    recovered = tmp_path / "recovered.tach"
    r = tach_cli("recover", journal, "-o", recovered)
    assert r.returncode == 0, r.stderr
    data = _native.load(str(recovered))  # the full verification of the Rust reader
    assert data["stats"] is None and data["sample_count"] == len(data["samples"])

    # The recorder's count of samples written by 1 s before the death, against the
    # samples of that time the recovered file holds.
    before = [(t, n) for t, n in progress if t <= killed_at - 1.0]
    assert before, f"no progress report 1 s before the end ({progress[:3]}, end {killed_at})"
    t_ref, taken = before[-1]
    kept = sum(1 for s in data["samples"] if s[2] <= t_ref * 1e6)
    last_us = max(s[2] for s in data["samples"])
    print(f"\ncrash {how}: kept {kept} of {taken} samples taken up to {killed_at - t_ref:.2f} s "
          f"before the end; recovered {len(data['samples'])} samples, the last "
          f"{killed_at - last_us / 1e6:.3f} s before the end ({r.stderr.strip()})", file=sys.stderr)
    assert taken > 200, progress
    assert kept >= 0.9 * taken, (kept, taken)
    assert any(f[1] == "leaf" for f in data["frames"])

    cmd = replay_command()
    if cmd is None or (cmd[0] == CHROOT and not str(tmp_path).startswith(REPO + os.sep)):
        print("SKIPPED: crash: CPython 3.15 (or its chroot under the checkout) is not available "
              "to replay the recovered file", file=sys.stderr)
        pytest.skip("crash: CPython 3.15 (or its chroot under the checkout) is not available")
    replayed = tmp_path / "replay.txt"
    rp = subprocess.run(
        [*cmd, "-m", "profiling.sampling", "replay", "--collapsed", "-o", str(replayed), str(recovered)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert rp.returncode == 0, rp.stderr + rp.stdout
    theirs = []
    for line in replayed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        theirs.append((stack, int(count)))
    assert theirs == collapsed(data)
    assert sum(n for _, n in theirs) == sum(1 for s in data["samples"] if s[4])


@pytest.mark.front_end
def test_a_clean_stop_leaves_no_journal(tmp_path):
    script = write_script(tmp_path, """
        import time
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.6:
            pass
    """)
    _, data = run_recorded(tmp_path, script)
    assert len(data["samples"]) > 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tach", "script.py"]


FAILING = """
    import sys, time
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.3:
        pass
    open(sys.argv[1], "w").write("ran")
    sys.exit(int(sys.argv[2]))
"""


@pytest.mark.front_end
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_recording_that_fails_exits_non_zero(tmp_path):
    """docs/recording.md, "Exit status", in-process: a recording that ends in error (its
    file on a full disk, /dev/full) lets the program run to its end, then `python -m tach
    run` exits 1 where the program exited 0, and with the program's own status otherwise,
    as `tach record` does (tests/suite/record_exit.rs)."""
    script = write_script(tmp_path, FAILING)
    for status, expected in [(0, 1), (3, 3)]:
        mark = tmp_path / f"ran-{status}"
        proc = subprocess.run(
            [sys.executable, "-m", "tach", "run", "-o", "/dev/full", str(script), str(mark),
             str(status)],
            capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path,
        )
        assert proc.returncode == expected, proc.stderr
        assert "No space left on device" in proc.stderr, proc.stderr
        assert mark.exists(), proc.stderr


ROTATED = """
    import sys, time
    def spin(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sum(range(500))
    spin(float(sys.argv[1]))
"""


def rotated_segments(directory):
    return sorted(p for p in os.listdir(directory) if p.endswith(".tach"))


@pytest.mark.front_end
def test_in_process_rotation_writes_segments_that_hold_every_sample_once(tmp_path):
    """`python -m tach run --rotate` and `tach.start(rotate=...)`: a directory of
    complete segments, each of which loads on its own, whose samples add up to the
    recording's count, none before the segment's own start and none repeated."""
    script = write_script(tmp_path, ROTATED)
    proc = subprocess.run(
        [sys.executable, "-m", "tach", "run", "-r", "200", "--rotate", "1s", "--keep", "1h",
         "-o", str(tmp_path / "cli"), str(script), "3.5"],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    api = run_python(tmp_path, f"""
        import sys, time, tach
        sys.argv = ["x", "3.5"]
        tach.start({str(tmp_path / "api")!r}, rate=200, rotate="1s", quiet=True)
        exec(open({str(script)!r}).read())
        tach.stop()
    """)
    assert api.returncode == 0, api.stderr
    for name in ("cli", "api"):
        names = rotated_segments(tmp_path / name)
        assert len(names) >= 3, (name, names)
        total, stamps = 0, []
        for n in names:
            data = _native.load(str(tmp_path / name / n))
            total += len(data["samples"])
            stamps += [(s[0], s[2]) for s in data["samples"]]  # (thread, timestamp_us)
        assert total > 400, (name, total)
        # Every sample in one segment: no timestamp twice across the boundaries.
        assert len(stamps) == len(set(stamps)), name
    said = int(proc.stderr.split(" samples in")[0].rsplit(" ", 1)[-1].replace(",", ""))
    cli_total = sum(len(_native.load(str(tmp_path / "cli" / n))["samples"])
                    for n in rotated_segments(tmp_path / "cli"))
    assert said == cli_total, proc.stderr
