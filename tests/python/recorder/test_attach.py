"""The `tach` binary recording Python processes from outside: `tach record --pid`,
`tach record -- python app.py`, `tach dump`.

Targets run on every interpreter here that tach attaches to: the host's pyenv CPython
3.9, 3.10, 3.11, 3.12 (layouts generated from their headers, src/record/interpreter/layout/generated.rs)
and 3.13, and the chroot's Debian CPython 3.13, 3.14 and 3.15 (the host's tach reads a
process in the chroot through /proc/PID/root). None of them has the tach package: the
recording needs none. Older pyenv interpreters (3.7, 3.8) check the error that names
their version. Each file is read back with ``tach._native.load`` (the Rust reader's
full verification) and, where the chroot is available, replayed by CPython 3.15, whose
collapsed stacks (names, files, lines) must equal tach's own rendering.

Accuracy on real programs against py-spy is python/bench/accuracy.py with ``--attach``
(test_attach_accuracy_against_pyspy below).

Run by tests/python/run_all.sh with the host's .venv (which has the tach package, for
``_native.load``), and TACH_BIN naming the tach binary (default target/debug/tach).
"""

import collections
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tach import _native

from conftest import CHROOT, REPO, TACH, THREADS_MIXED, ReadyProgram, chroot_ok, collapsed_counts
from conftest import installed_pyspy, line_in_text, pyenv_python, run_tach

HARNESS = os.path.join(REPO, "python", "bench", "accuracy.py")
TIMEOUT = 120

HAS_GIL, ON_CPU, UNKNOWN, GIL_REQUESTED, HAS_EXCEPTION, MAIN_THREAD = 1, 2, 4, 8, 16, 32

TARGET = THREADS_MIXED


def interpreters():
    """(id, command prefix, in the chroot) for every interpreter tach attaches to."""
    out = []
    for minor in (9, 10, 11, 12, 13):
        host = pyenv_python(minor)
        out.append((f"host-3.{minor}", [host] if host else None, False))
    have_chroot = chroot_ok()
    for v in ("3.13", "3.14", "3.15"):
        out.append((f"chroot-{v}", [CHROOT, "run", "--", f"python{v}"] if have_chroot else None, True))
    return out


INTERPRETERS = interpreters()


def need(interp):
    name, cmd, _ = interp
    if cmd is None:
        pytest.skip(f"SKIPPED: attach on {name}: that interpreter is not available here")
    if not os.path.exists(TACH):
        pytest.fail(f"no tach binary at {TACH} (cargo build, or set TACH_BIN)")
    return cmd


tach = functools.partial(run_tach, timeout=TIMEOUT)


def stacks(data):
    """[(thread_id, status, [(funcname, lineno), ...innermost first])]."""
    frames = [(f[1], f[2]) for f in data["frames"]]
    return [(tid, status, [frames[i] for i in stack]) for tid, _, _, status, stack in data["samples"]]


def version_of(interp):
    return tuple(int(x) for x in interp[0].split("-")[1].split("."))


def replay_count(path):
    """Samples CPython 3.15's own reader finds in `path` (None without the chroot), after
    checking that its collapsed stacks (every name, file and line) are tach's."""
    if not chroot_ok():
        return None
    out = path + ".collapsed"
    p = subprocess.run([CHROOT, "run", "--", "python3.15", "-m", "profiling.sampling", "replay",
                        "--collapsed", "-o", out, path], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    ours = path + ".tach-collapsed"
    t = tach("export", "--collapsed", "-o", ours, path)
    assert t.returncode == 0, t.stderr
    assert collapsed_counts(out) == collapsed_counts(ours)
    return sum(collapsed_counts(out).values())


def full_version(cmd):
    """(major, minor, micro) of the interpreter `cmd` runs."""
    p = subprocess.run(cmd + ["-c", "import sys; print(*sys.version_info[:3])"], cwd=REPO,
                       capture_output=True, text=True, timeout=TIMEOUT)
    return tuple(int(x) for x in p.stdout.split())


def bootstrap_name(interp):
    """Before 3.11 a code object has no qualified name: frames are named by co_name, as
    in CPython's and py-spy's tracebacks of those versions."""
    return "Thread._bootstrap" if version_of(interp) >= (3, 11) else "_bootstrap"


WELL_FORMED = None


def well_formed(stack):
    """leaf (at its loop or its body) <- middle <- <module>, at the marked lines."""
    names = [f[0] for f in stack]
    return (
        names == ["leaf", "middle", "<module>"]
        and stack[0][1] in (line_in_text(TARGET, "# LEAF"), line_in_text(TARGET, "# LEAF") - 1)
        and stack[1][1] == line_in_text(TARGET, "# MIDDLE")
        and stack[2][1] == line_in_text(TARGET, "# LOOP")
    )


def consistent(stack):
    """A moment of the main loop: well formed, or between leaf's calls."""
    return well_formed(stack) or stack in (
        [("middle", line_in_text(TARGET, "# MIDDLE")), ("<module>", line_in_text(TARGET, "# LOOP"))],
        [("<module>", line_in_text(TARGET, "# LOOP"))],
        [("<module>", line_in_text(TARGET, "# LOOP") - 1)],
    )


# ------------------------------------------------------------------ tach dump


@pytest.mark.parametrize("interp", INTERPRETERS, ids=[i[0] for i in INTERPRETERS])
def test_dump_shows_every_threads_stack_and_status(interp, work):
    cmd = need(interp)
    with ReadyProgram(cmd, work, TARGET, 30) as t:
        dumps = []
        for _ in range(10):
            p = tach("dump", "--json", str(t.pid))
            assert p.returncode == 0, p.stderr
            dumps.append(json.loads(p.stdout))
        text = tach("dump", str(t.pid))
        assert text.returncode == 0, text.stderr
    assert f"Thread {t.pid} (main" in text.stdout
    mains = [next(th for th in d if th["main_thread"]) for d in dumps]
    assert all(m["thread_id"] == t.pid for m in mains)
    # The main thread runs leaf under middle: most dumps catch it there, at the lines.
    shaped = [m for m in mains if well_formed([(f["function"], f["line"]) for f in m["frames"]])]
    assert len(shaped) >= 6, [m["frames"] for m in mains]
    assert all(m["frames"][0]["file"] == t.script for m in shaped)
    # Busy: it holds the GIL in most dumps, and is on a CPU in many (on a loaded machine
    # the kernel deschedules it, and the flag says so).
    assert sum(m["has_gil"] for m in mains) >= 6, mains
    main_on_cpu = sum(m["on_cpu"] for m in mains)
    assert main_on_cpu >= 3, mains
    sleepers = [th for d in dumps for th in d if not th["main_thread"]]
    assert len(sleepers) == 10
    for s in sleepers:
        assert s["frames"][0]["function"] == "sleeper"
        assert s["frames"][0]["line"] == line_in_text(TARGET, "# SLEEP")
        assert s["frames"][-1]["function"] == bootstrap_name(interp)
    # Asleep in time.sleep most of the time: without the GIL and off CPU. It wakes every
    # 20 ms and may then wait up to the 5 ms switch interval for the GIL, so not always.
    assert sum(not s["has_gil"] for s in sleepers) >= 6
    assert sum(not s["on_cpu"] for s in sleepers) >= 6
    assert sum(s["on_cpu"] for s in sleepers) < main_on_cpu


# ------------------------------------------------------------ tach record --pid


@pytest.mark.parametrize("interp", INTERPRETERS, ids=[i[0] for i in INTERPRETERS])
def test_record_pid_stacks_status_and_replay(interp, work):
    cmd = need(interp)
    out = os.path.join(work, "out.tach")
    with ReadyProgram(cmd, work, TARGET, 30) as t:
        # 3 s: over 1,000 main-thread samples even when a loaded machine gives the sampler
        # 500 Hz (it did, at a load of 12 on 2 cores).
        p = tach("record", "--pid", str(t.pid), "-a", "--mode", "cpu", "-d", "3", "-o", out)
    assert p.returncode == 0, p.stderr
    assert re.search(r"tach: [\d,]+ samples in 3\.\d\d s", p.stderr), p.stderr
    data = _native.load(out)
    assert data["python_version"][:2] == version_of(interp)
    if not interp[2]:
        # The micro version too (before 3.11 from the PY_VERSION string in the binary).
        assert tuple(data["python_version"]) == full_version(cmd)
    assert data["mode"] == "cpu"
    st = stacks(data)
    main = [s for s in st if s[0] == t.pid]
    # cpu mode keeps on-CPU samples: the busy main thread's, far fewer of the sleeper's.
    # On a loaded machine a sleeper that woke waits in the run queue, and runnable counts
    # as on CPU (`R`, as CPython reads it): at a load of 10 on 2 cores it was on CPU in
    # up to a quarter as many samples as the main thread.
    assert len(main) > 1000, (len(main), p.stderr)
    assert len(main) > 2 * (len(st) - len(main))
    assert all(status & MAIN_THREAD and status & ON_CPU for _, status, _ in main)
    assert sum(bool(status & HAS_GIL) for _, status, _ in main) > 0.9 * len(main)
    # Blocking (the default at 1 kHz): every stack is one moment's, at the right lines.
    # Those with the GIL, that is: the main thread drops it when the sleeper asks for it,
    # and 3.9/3.10 drop it in `middle` before its call, a stack of its own (without leaf)
    # that a loaded machine makes last (1% of the samples at a load of 12). The moments
    # between leaf's calls are real too: <module> on its loop condition, middle before its
    # call (on 3.9/3.10, which allocate a frame object per call, over 1% of the samples).
    torn = [s for _, status, s in main if status & HAS_GIL and not consistent(s)]
    assert len(torn) < 0.01 * len(main), torn[:5]
    assert data["stats"]["error_rate"] < 1.0, data["stats"]
    replayed = replay_count(out)
    if replayed is not None:
        # Samples taken before the program's first frame (the interpreter starting up)
        # have an empty stack, which a collapsed rendering leaves out.
        assert replayed == sum(1 for _, _, s in st if s)


@pytest.mark.parametrize("interp", INTERPRETERS, ids=[i[0] for i in INTERPRETERS])
def test_record_starts_the_program_and_returns_its_status(interp, work):
    """`tach record -- python app.py`: no tach package in the target, its exit status is
    tach's. In the chroot, tach runs there too (the program is its child)."""
    cmd = need(interp)
    script = os.path.join(work, "target.py")
    with open(script, "w") as f:
        f.write(TARGET)
    out = os.path.join(work, "out.tach")
    python = cmd[-1]
    # 3 s: at least 1,000 samples even when a loaded machine gives the sampler 600 Hz.
    record = [TACH, "record", "-o", out, "--", python, script, "3", "7"]
    if interp[2]:
        record = [CHROOT, "run", "--"] + record
    p = subprocess.run(record, capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)
    assert p.returncode == 7, p.stderr
    assert "samples in" in p.stderr and "written to" in p.stderr, p.stderr
    data = _native.load(out)
    assert data["python_version"][:2] == version_of(interp)
    st = stacks(data)
    shaped = [s for _, _, s in st if well_formed(s)]
    assert len(shaped) > 1000, (len(shaped), len(st), p.stderr)
    assert subprocess.run([TACH, "verify", out], capture_output=True).returncode == 0
    replayed = replay_count(out)
    if replayed is not None:
        # Samples taken before the program's first frame (the interpreter starting up)
        # have an empty stack, which a collapsed rendering leaves out.
        assert replayed == sum(1 for _, _, s in st if s)


@pytest.mark.parametrize("interp", INTERPRETERS, ids=[i[0] for i in INTERPRETERS])
def test_opcodes_from_outside(interp, work):
    """--opcodes from outside, checked against the target interpreter's own `dis`: from
    3.11 on, the opcodes are de-specialised with the tables generated from each version's
    headers (3.13's and 3.14's interpreters export none), so every frame is on a base
    opcode, callers on a call, and the hot loop on its arithmetic. 3.9 and 3.10 are
    refused by name."""
    cmd = need(interp)
    out = os.path.join(work, "out.tach")
    with ReadyProgram(cmd, work, TARGET, 30) as t:
        p = tach("record", "--pid", str(t.pid), "--opcodes", "-d", "2", "-o", out)
    version = version_of(interp)
    if version < (3, 11):
        assert p.returncode == 1, p.stderr
        assert f"opcodes cannot be recorded on CPython {version[0]}.{version[1]}" in p.stderr, p.stderr
        return
    assert p.returncode == 0, p.stderr
    probe = subprocess.run(cmd + ["-c", "import dis, json; print(json.dumps(dis.opmap))"],
                           capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)
    opmap = json.loads(probe.stdout)
    data = _native.load(out)
    assert "opcodes" in data["features"]
    frames = data["frames"]
    ops = collections.Counter(frames[i][6] for *_, stack in data["samples"] for i in stack)
    assert sum(ops.values()) > 1000, ops
    base = set(opmap.values())
    # (but for the rare torn read, whose instruction pointer may point anywhere)
    assert sum(n for op, n in ops.items() if op in base) > 0.99 * sum(ops.values()), ops
    calls = {v for k, v in opmap.items() if k.startswith("CALL") or k == "PRECALL"}
    callers = collections.Counter(frames[i][6] for *_, stack in data["samples"] for i in stack[1:]
                                  if frames[i][1] in ("middle", "<module>"))
    assert sum(n for op, n in callers.items() if op in calls) > 0.98 * sum(callers.values()), callers
    leaf = collections.Counter(frames[s[0]][6] for *_, s in data["samples"] if s and frames[s[0]][1] == "leaf")
    assert opmap["BINARY_OP"] in leaf and opmap["FOR_ITER"] in leaf, leaf


EXCEPTIONS = """\
import sys, time

def handler():
    try:
        raise ValueError("x")
    except ValueError:
        end = time.monotonic() + 0.002
        while time.monotonic() < end:  # HANDLING
            pass

def plain():
    end = time.monotonic() + 0.002
    while time.monotonic() < end:  # PLAIN
        pass

print("ready", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    handler()
    plain()
"""


@pytest.mark.parametrize("interp", INTERPRETERS, ids=[i[0] for i in INTERPRETERS])
def test_exception_mode_from_outside(interp, work):
    """3.15's debug offsets hold the exception state, and so do the generated layouts
    of 3.9-3.12 and the generated extras of 3.13 and 3.14 (whose debug offsets lack
    it): exception mode keeps the samples taken while an exception is handled."""
    cmd = need(interp)
    out = os.path.join(work, "out.tach")
    with ReadyProgram(cmd, work, EXCEPTIONS, 30, name="exceptions.py") as t:
        p = tach("record", "--pid", str(t.pid), "--mode", "exception", "-d", "2", "-o", out)
    assert p.returncode == 0, p.stderr
    st = stacks(_native.load(out))
    assert len(st) > 300, p.stderr
    assert all(status & HAS_EXCEPTION for _, status, _ in st)
    inner = [s[0][0] for _, _, s in st]
    assert inner.count("handler") > 0.95 * len(inner), inner[:20]
    assert "plain" not in inner


# ------------------------------------------------------- programs that end soon

CHURN = """\
import sys, threading, time

def work():
    s = 0
    for i in range(2000):
        s += i

end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
sys.exit(int(sys.argv[2]))
"""


@pytest.mark.parametrize("interp", INTERPRETERS, ids=[i[0] for i in INTERPRETERS])
def test_record_returns_when_threads_end_while_paused(interp, work):
    """`tach record --` of a program whose threads start and end all the time (each one
    holds the GIL, so the sampler pauses it; some end while paused), and of one that
    exits at once (while tach looks for its interpreter): tach returns the program's
    status every time. A thread that ended while ptrace held it stayed a zombie traced
    by tach, and the kernel did not report the program's exit: tach waited forever
    (before, 18 of 20 runs of the first program on 3.11, and 5 of 5 on 3.13)."""
    cmd = need(interp)
    python = cmd[-1]
    churn = os.path.join(work, "churn.py")
    with open(churn, "w") as f:
        f.write(CHURN)
    quick = os.path.join(work, "quick.py")
    with open(quick, "w") as f:
        f.write("import sys\nsys.exit(int(sys.argv[2]))\n")
    runs = [(churn, "0.5")] * 3 + [(quick, "0")] * 5
    for i, (script, seconds) in enumerate(runs):
        out = os.path.join(work, f"out{i}.tach")
        record = [TACH, "record", "-o", out, "--", python, script, seconds, "5"]
        if interp[2]:
            record = [CHROOT, "run", "--"] + record
        try:
            p = subprocess.run(record, capture_output=True, text=True, timeout=60, cwd=REPO)
        except subprocess.TimeoutExpired:
            pytest.fail(f"tach record -- {os.path.basename(script)} hung (run {i})")
        assert p.returncode == 5, (i, p.stderr)
        assert "panicked" not in p.stderr, p.stderr
        data = _native.load(out)
        if script == churn:
            assert len(data["samples"]) > 50, (i, p.stderr)


# ------------------------------------------------------------ errors and targets


def test_a_pid_that_is_not_python_or_gone_gets_a_clear_error(work):
    out = os.path.join(work, "out.tach")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        p = tach("record", "--pid", str(sleeper.pid), "-o", out)
        assert p.returncode == 1
        assert f"process {sleeper.pid}" in p.stderr and "is not a Python process" in p.stderr, p.stderr
        assert "panicked" not in p.stderr
        # A valid, empty file beside the error.
        assert _native.load(out)["samples"] == []
        d = tach("dump", str(sleeper.pid))
        assert d.returncode == 1 and "is not a Python process" in d.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    p = tach("record", "--pid", str(sleeper.pid), "-o", out)
    assert p.returncode == 1 and f"no process {sleeper.pid}" in p.stderr, p.stderr


@pytest.mark.parametrize("minor", [7, 8])
def test_unsupported_versions_are_named(minor, work):
    python = pyenv_python(minor)
    if python is None:
        pytest.skip(f"SKIPPED: attach error on 3.{minor}: no pyenv CPython 3.{minor} here")
    target = subprocess.Popen([python, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().strip() == "ready"
        out = os.path.join(work, "out.tach")
        p = tach("record", "--pid", str(target.pid), "-o", out)
        assert p.returncode == 1, p.stderr
        assert re.search(rf"runs CPython 3\.{minor}\.\d+, which tach cannot record from outside", p.stderr), p.stderr
        assert "panicked" not in p.stderr
        assert _native.load(out)["samples"] == []
        d = tach("dump", str(target.pid))
        assert d.returncode == 1 and f"CPython 3.{minor}" in d.stderr
    finally:
        target.kill()
        target.wait()


def test_a_target_killed_mid_recording_leaves_a_valid_file(work):
    interp = next((i for i in INTERPRETERS if i[1] is not None), None)
    if interp is None:
        pytest.skip("SKIPPED: attach: no interpreter tach attaches to is available here")
    out = os.path.join(work, "out.tach")
    with ReadyProgram(interp[1], work, TARGET, 60) as t:
        rec = subprocess.Popen([TACH, "record", "--pid", str(t.pid), "-a", "-o", out],
                               stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        os.kill(t.pid, signal.SIGKILL)
        _, err = rec.communicate(timeout=30)
    assert rec.returncode == 0, err
    data = _native.load(out)
    assert len(data["samples"]) > 500, err


FORKS_AND_THREADS = """\
import os, sys, threading, time

def short():
    sum(range(1000))

def busy(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))

print("ready", flush=True)
for round in range(4):
    for _ in range(250):
        t = threading.Thread(target=short)
        t.start()
        t.join()
    pid = os.fork()
    if pid == 0:
        busy(0.2)
        os._exit(0)
    busy(0.2)
    os.waitpid(pid, 0)
"""


def test_forks_and_a_thousand_short_threads(work):
    interp = next((i for i in INTERPRETERS if i[1] is not None), None)
    if interp is None:
        pytest.skip("SKIPPED: attach: no interpreter tach attaches to is available here")
    out = os.path.join(work, "out.tach")
    with ReadyProgram(interp[1], work, FORKS_AND_THREADS, 0, name="forks.py") as t:
        p = tach("record", "--pid", str(t.pid), "-a", "-o", out, timeout=60)
        assert t.proc.wait(timeout=60) == 0
    assert p.returncode == 0, p.stderr
    data = _native.load(out)
    threads = {tid for tid, *_ in data["samples"]}
    # Sampled are the main thread and some of the short ones; the forked children are
    # other processes, not followed without --subprocesses.
    assert t.pid in threads
    assert len(data["samples"]) > 200, p.stderr


@pytest.mark.parametrize("interp", INTERPRETERS, ids=[i[0] for i in INTERPRETERS])
def test_subprocesses_follow_a_real_program(interp, work):
    """`tach record --subprocesses -- python -m compileall -j 2`: the standard library's
    compileall compiles copies of stdlib packages in a pool of worker processes
    (fork before 3.14, forkserver from 3.14: the workers are then grandchildren). One
    file for the program and one per Python child, named OUT_<pid>.tach as CPython 3.15
    names them; every file verifies; the program's file has compileall's main and the
    workers' files have `compile_file`, with most of the samples."""
    cmd = need(interp)
    probe = subprocess.run(cmd + ["-c", "import email, os; print(os.path.dirname(os.path.dirname(email.__file__)))"],
                           capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)
    lib = probe.stdout.strip()
    if interp[2]:
        lib = subprocess.run([CHROOT, "path"], capture_output=True, text=True).stdout.strip() + lib
    src = os.path.join(work, "src")
    # About 2 s of compiling on 2 cores: each worker lives long enough to be found.
    for copy in range(4):
        for pkg in ("email", "json", "asyncio", "unittest", "http", "xml"):
            shutil.copytree(os.path.join(lib, pkg), os.path.join(src, f"{pkg}{copy}"),
                            ignore=shutil.ignore_patterns("__pycache__", "test*"))
    out = os.path.join(work, "out.tach")
    p = tach("record", "--subprocesses", "-o", out, "--", *cmd,
             "-m", "compileall", "-f", "-q", "-j", "2", src, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    children = sorted(f for f in os.listdir(work) if re.fullmatch(r"out_\d+\.tach", f))
    assert len(children) >= 2, (os.listdir(work), p.stderr)
    for f in ["out.tach"] + children:
        v = subprocess.run([TACH, "verify", os.path.join(work, f)], capture_output=True, text=True)
        assert v.returncode == 0, (f, v.stderr)
    root = {name for _, _, st in stacks(_native.load(out)) for name, _ in st}
    assert "main" in root, sorted(root)[:20]
    compiling = 0
    total = 0
    for f in children:
        st = stacks(_native.load(os.path.join(work, f)))
        total += len(st)
        compiling += sum(1 for _, _, s in st if any(name == "compile_file" for name, _ in s))
    assert compiling > 200 and compiling > 0.3 * total, (compiling, total, p.stderr)


# ------------------------------------------------------------------ accuracy


# Two real programs per version. The packages are installed once, by the harness's
# interpreter (3.11): the releases it gets of networkx and pyflakes need 3.10 and 3.11
# (ast.Match), so 3.9 and 3.10 run jinja2 instead.
ACCURACY = [(9, "pygments,jinja2"), (10, "pygments,jinja2"), (11, "networkx,pygments"),
            (12, "networkx,pygments"), (13, "networkx,pygments")]


@pytest.mark.parametrize("minor,programs", ACCURACY, ids=[f"3.{m}" for m, _ in ACCURACY])
def test_attach_accuracy_against_pyspy(minor, programs, tmp_path):
    """tach attached from outside and py-spy attached to the same execution agree on
    real programs within 3 points per function (the goal is 2; see the bound below).
    15 s: py-spy gets at least 5,000 samples on a loaded machine (about 400 Hz at a
    load of 10). Both at 1 kHz: tach is outside, so
    py-spy's stops do not hold its sampler, and at 200 Hz py-spy's own sampling noise
    (about 1 point on a share near 50%) was most of the gap."""
    python = pyenv_python(minor)
    if python is None:
        pytest.skip(f"SKIPPED: attach accuracy: no pyenv CPython 3.{minor} here")
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > 2 * cores:
        # At loads of 7-12 on 2 cores py-spy got 200-400 Hz and
        # failed up to half its samples while tach's pause, descheduled with it, held
        # the thread; generator-heavy programs (pygments, networkx) then moved by 2-7
        # points between runs on every version, 3.13 included. Not a measurement.
        pytest.skip(f"SKIPPED: attach accuracy on 3.{minor}: load {load:.1f} on {cores} "
                    "cores, py-spy and tach starve each other")
    installed_pyspy("attach accuracy")
    out = tmp_path / "accuracy.json"
    run = subprocess.run(
        [sys.executable, HARNESS, "--programs", programs, "--seconds", "15",
         "--reference-rate", "1000", "--same-process", "--attach", TACH, "--python", python,
         "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )
    print(run.stdout, file=sys.stderr)
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads(out.read_text())["results"]
    for name in programs.split(","):
        r = results[name]
        assert r["samples"] > 5000 and r["reference_samples"] > 5000, (name, r)
        assert r["error_rate"] <= 1.0, (name, r["error_rate"])
        # The goal is 2 points. On a quiet machine (load 0.7-1.2) every
        # version gave 0.4-1.6 (docs/recorder.md); at a load of 3-4 on 2 cores
        # the largest gaps were 1.7-2.8 (pygments' get_tokens_unprocessed
        # on 3.9 and 3.10), and CI's 2 cores run this beside py-spy and the program, so
        # the test holds 3; reading running threads (--no-blocking) gives 7-18 on these
        # programs, which this still fails.
        assert r["largest_gap"] <= 3.0, (name, r["largest_gap"], r["where"])
