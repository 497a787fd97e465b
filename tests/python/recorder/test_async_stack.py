"""Async-aware stacks on CPython 3.11-3.13 (`tach record --async-aware`, `running`
mode), where tach finds the running task from the thread's stack (src/record/
stack_tasks.rs): the frame just outside the task's coroutine is the event loop's
`Handle._run`, whose callback is the task's step.

No CPython tool shows tasks on these versions, so the references are programs whose
tasks are known by construction, and a real server from PyPI:

- Three tasks doing distinct work, two named and one not (its name, `Task-N`, is an int
  inside the task until `get_name()` on 3.12 and 3.13: the program prints it only once
  the recording is over), one woken by a timer (the step is the `task_wakeup` callback)
  and two by `sleep(0)` (a `TaskStepMethWrapper`), and a fourth task awaiting one of
  them: every sample of a task's work has that task's frame as its root, right above
  the task's coroutine; no sample shows the loop between tasks or a task above another
  (these versions keep no link from a task to its waiters).
- uvicorn answering 8 named httpx.AsyncClient tasks (the server of test_async.py): the
  client code runs under its `client-K` task, each client a fair share, and uvicorn's
  request handling under its own unnamed tasks.
- Faults, as test_async.py has them on 3.15: tasks whose name object is a float (their
  samples dropped and counted), 10,000 waiting tasks with short ones created and
  finished all the time while the loop is closed and opened again; and a program not
  using asyncio records as without the flag.
- `--async-mode all` and 3.9-3.10 are refused by name, for `record` and `dump`.

On pyenv's 3.11, 3.12 and 3.13 and the chroot's Debian 3.13; each skips loudly where
missing.
"""

import collections
import functools
import os
import re
import subprocess

import pytest

from conftest import CHROOT, TACH, ReadyProgram, chroot_ok, collapsed_stacks
from conftest import pyenv_python, run_tach
from test_async import BAD_NAMES, FAULTS, PLAIN, SERVER, function_of
from test_async import pinned_site, summary_errors, verify
from test_async import site  # noqa: F401  (the fixture with the server's wheels)

TIMEOUT = 180
WHERE = ["pyenv-3.11", "pyenv-3.12", "pyenv-3.13", "chroot-3.13"]
# What anyio needs on 3.11 and 3.12 beyond test_async.py's wheels (pure Python, pinned).
EXTRA_WHEELS = ["typing_extensions==4.16.0"]

NAMED = """\
import asyncio, sys, time

def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

def work_alpha():
    spin(0.002)

def work_beta():
    spin(0.001)

def work_gamma():
    # A generator driven from C inside the task: its frame is entered from C too.
    return sum(i for i in range(20000))

async def alpha():
    while True:
        work_alpha()
        await asyncio.sleep(0)

async def beta():
    while True:
        work_beta()
        await asyncio.sleep(0.0005)

async def gamma():
    while True:
        work_gamma()
        await asyncio.sleep(0)

async def waiter(task):
    await task

async def main(seconds):
    a = asyncio.create_task(alpha(), name="alpha")
    b = asyncio.create_task(beta(), name="beta")
    g = asyncio.create_task(gamma())
    w = asyncio.create_task(waiter(g), name="waiter")
    print("ready", flush=True)
    await asyncio.sleep(seconds)
    print("names", a.get_name(), b.get_name(), g.get_name(), flush=True)
    for t in (a, b, g, w):
        t.cancel()

asyncio.run(main(float(sys.argv[1])))
"""

HAVE_CHROOT = chroot_ok()


tach = functools.partial(run_tach, timeout=TIMEOUT)


def interpreter(where):
    """The command running a script on `where` (`pyenv-3.N` or `chroot-3.N`)."""
    kind, version = where.split("-")
    if kind == "chroot":
        if not HAVE_CHROOT:
            pytest.skip("SKIPPED: async-aware stacks on the chroot's CPython: the chroot is "
                        "not set up (scripts/cpython-chroot setup)")
        return [CHROOT, "run", "--", f"python{version}"]
    python = pyenv_python(int(version.split(".")[1]))
    if python is None:
        pytest.skip(f"SKIPPED: async-aware stacks on pyenv's CPython {version}: not installed")
    return [python]


def record(pid, out, seconds):
    """`tach record --async-aware` of `pid`; its collapsed stacks as [(frames root first,
    count)], and the share of ticks with errors."""
    r = tach("record", "--pid", str(pid), "--async-aware", "-r", "500", "-d", str(seconds),
             "-o", out)
    assert r.returncode == 0, r.stderr
    errors = float(re.search(r"([0-9.]+)% ticks with errors", r.stderr).group(1))
    e = tach("export", "--collapsed", "-o", out + ".collapsed", out)
    assert e.returncode == 0, e.stderr
    return collapsed_stacks(out + ".collapsed"), errors, r.stderr


def tasks_of(frames):
    return [function_of(f)[1] for f in frames if f.startswith("<task>:")]


def funcs_of(frames):
    return [function_of(f)[1] for f in frames]


def coroutine_shares(stacks):
    """{coroutine: % of the samples in one of alpha, beta and gamma}, and how many."""
    counts = collections.Counter()
    for frames, n in stacks:
        hit = set(funcs_of(frames)) & {"alpha", "beta", "gamma"}
        if len(hit) == 1:
            counts[hit.pop()] += n
    total = sum(counts.values())
    return {k: 100.0 * v / max(total, 1) for k, v in counts.items()}, total


@pytest.mark.parametrize("where", WHERE)
def test_each_tasks_work_is_under_its_task(where, work):
    """Per sample, by construction: a task's work is under its task's frame. No task
    left out: against tach without the flag recording the same execution at the same
    time (the walk itself is checked against py-spy and CPython in test_attach.py and
    test_accuracy.py), a task whose steps were not found would be missing from the
    async-aware samples, not wrong in them. (py-spy attached beside tach here got 37-91%
    of its samples and moved by up to 12 points between runs, both ways: not a reference
    for this.)"""
    cmd = interpreter(where)
    seconds = 6
    target = ReadyProgram(cmd, work, NAMED, seconds + 4, name="aio_named.py", timeout=TIMEOUT)
    plain_out = os.path.join(work, "plain.tach")
    try:
        plain = subprocess.Popen([TACH, "record", "--pid", str(target.pid), "-r", "500", "-d",
                                  str(seconds), "-o", plain_out],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stacks, errors, summary = record(target.pid, os.path.join(work, "named.tach"),
                                         seconds)
        _, plain_err = plain.communicate(timeout=TIMEOUT)
        rest, _ = target.proc.communicate(timeout=TIMEOUT)
    finally:
        target.stop()
    assert plain.returncode == 0, plain_err
    e = tach("export", "--collapsed", "-o", plain_out + ".collapsed", plain_out)
    assert e.returncode == 0, e.stderr
    names = rest.split("names", 1)[1].split()
    assert names[:2] == ["alpha", "beta"] and re.fullmatch(r"Task-\d+", names[2]), rest
    work_of = {"work_alpha": ("alpha", names[0]), "work_beta": ("beta", names[1]),
               "work_gamma": ("gamma", names[2])}
    total = sum(n for _, n in stacks)
    share = collections.Counter()
    wrong = []
    for frames, n in stacks:
        fs, ts = funcs_of(frames), tasks_of(frames)
        # The loop between tasks has no sample, and nothing of it is under a task.
        if not ts or "BaseEventLoop._run_once" in fs or "Handle._run" in fs:
            wrong.append((frames, n))
            continue
        # One task frame, the root: no task above another before 3.14.
        if len(ts) != 1 or not frames[0].startswith("<task>:"):
            wrong.append((frames, n))
            continue
        for func, (coro, name) in work_of.items():
            if func in fs:
                # The task's frame right above its coroutine's frame.
                if ts[0] != name or fs[1] != coro:
                    wrong.append((frames, n))
                else:
                    share[name] += n
    ref, ref_total = coroutine_shares(collapsed_stacks(plain_out + ".collapsed"))
    ours_total = sum(share.values())
    ours = {coro: 100.0 * share[name] / ours_total for coro, name in work_of.values()}
    report = ", ".join(f"{coro} {ref.get(coro, 0):.1f}/{ours[coro]:.1f}"
                       for coro, _ in work_of.values())
    print(f"{where}: {summary.strip()}\n{dict(share)} of {total}, "
          f"{sum(n for _, n in wrong)} wrong; % of each task without/with the flag: "
          f"{report} ({ref_total}/{ours_total} samples)")
    assert errors < 1.0, summary
    assert sum(n for _, n in wrong) <= 0.01 * total, wrong[:5]
    for name in names[:3]:
        assert share[name] >= 0.05 * total, (name, share, total)
    # The program's loop always has a task ready (alpha and gamma yield with sleep(0)):
    # nearly every tick of the recording without the flag is in a task's coroutine, and
    # so is every sample of the async-aware one but the loop's own moments between steps
    # (1-3% measured). A task whose steps were not found would take its share (at least
    # 5%) out of the async-aware count. The shares themselves are printed, not compared:
    # two samplers at different instants of this bursty loop differ by up to 3 points
    # (CI compiling beside it), both ways.
    assert ref_total > 1000, ref_total
    assert ours_total >= 0.95 * ref_total, (ours_total, ref_total, report)


@pytest.fixture(scope="module")
def extra_site():
    """typing_extensions, which anyio needs before 3.13 (the server's own wheels are
    test_async.py's `site`)."""
    return pinned_site("test-async-stack-site", EXTRA_WHEELS, "typing_extensions")


@pytest.mark.parametrize("where", WHERE)
def test_a_real_server_runs_under_its_tasks(where, work, request):
    cmd = interpreter(where)
    path = f"{request.getfixturevalue('site')}:{request.getfixturevalue('extra_site')}"
    if cmd[0] == CHROOT:
        cmd = cmd[:3] + ["env", f"PYTHONPATH={path}"] + cmd[3:]
    else:
        cmd = ["env", f"PYTHONPATH={path}"] + cmd
    # Ticks when no thread holds the GIL read the loop's thread running, and some of
    # those reads tear: 0.35-0.60% of ticks on an idle machine, 1.05% once in CI with the
    # debug build beside other work. A second execution is taken when the first is over
    # the bound: the bound is the recorder's, not the machine's worst minute.
    for attempt in (1, 2):
        with ReadyProgram(cmd, work, SERVER, 10, name="aio_server.py",
                          timeout=TIMEOUT) as target:
            stacks, errors, summary = record(target.pid, os.path.join(work, "server.tach"), 4)
        if errors < 1.0:
            break
        print(f"attempt {attempt}: {summary.strip()}")
    total = sum(n for _, n in stacks)
    clients = collections.Counter()
    handlers = collections.Counter()
    wrong = []
    for frames, n in stacks:
        fs, ts = funcs_of(frames), tasks_of(frames)
        if len(ts) != 1 or not frames[0].startswith("<task>:") or "BaseEventLoop._run_once" in fs:
            wrong.append((frames, n))
        elif "client" in fs and fs[1] == "client":
            clients[ts[0]] += n
        elif "RequestResponseCycle.run_asgi" in fs:
            handlers[ts[0]] += n
    client_total = sum(clients.values())
    print(f"{where}: {summary.strip()}\nclients {dict(clients)} of {client_total}: "
          f"{100 * min(clients.values(), default=0) / max(client_total, 1):.1f}-"
          f"{100 * max(clients.values(), default=0) / max(client_total, 1):.1f}% each\n"
          f"handlers: {len(handlers)} tasks, {sum(handlers.values())} samples of {total}, "
          f"{sum(n for _, n in wrong)} wrong")
    assert errors < 1.0, summary
    assert sum(n for _, n in wrong) <= 0.01 * total, wrong[:5]
    # The 8 clients run the same loop: each gets a share of the client samples.
    assert set(clients) == {f"client-{k}" for k in range(8)}, clients
    assert client_total >= 0.3 * total, (client_total, total)
    assert all(0.04 * client_total <= c <= 0.3 * client_total for c in clients.values()), clients
    # uvicorn runs each request in a task of its own, unnamed.
    assert handlers and all(re.fullmatch(r"Task-\d+", t) for t in handlers), handlers


@pytest.mark.parametrize("where", ["pyenv-3.11", "pyenv-3.12", "pyenv-3.13", "chroot-3.13",
                                   "pyenv-3.9", "pyenv-3.10"])
def test_what_a_version_cannot_show_is_refused_by_name(where, work):
    """3.11-3.13 refuse `--async-mode all` (the waiting tasks are in no stack), 3.9 and
    3.10 `--async-aware` itself, for `record` (both modes) and `dump`, naming the
    version and the versions that can."""
    cmd = interpreter(where)
    minor = int(where.split(".")[1])
    with ReadyProgram(cmd, work, NAMED, 30, name="aio_named.py", timeout=TIMEOUT) as target:
        out = os.path.join(work, "x.tach")
        runs = [["record", "--pid", str(target.pid), "--async-aware", "--async-mode", "all",
                 "-d", "1", "-o", out],
                ["dump", "--async-aware", "--async-mode", "all", str(target.pid)]]
        if minor < 11:
            runs += [["record", "--pid", str(target.pid), "--async-aware", "-d", "1", "-o", out],
                     ["dump", "--async-aware", str(target.pid)]]
        for args in runs:
            r = tach(*args)
            assert r.returncode != 0, (args, r.stdout)
            assert "panicked" not in r.stderr
            if minor < 11:
                assert f"CPython 3.{minor} has neither" in r.stderr, (args, r.stderr)
                assert "--async-aware needs CPython 3.11 or later" in r.stderr, r.stderr
            else:
                assert "--async-mode all needs CPython 3.14 or 3.15" in r.stderr, r.stderr
                assert f"on CPython 3.{minor} tach shows the running task only" in r.stderr, \
                    r.stderr


@pytest.mark.parametrize("where", WHERE)
def test_faults_and_programs_without_asyncio(where, work):
    cmd = interpreter(where)

    def run(text, name, seconds):
        with ReadyProgram(cmd, work, text, seconds + 8, name=name, timeout=TIMEOUT) as target:
            out = os.path.join(work, name + ".tach")
            r = tach("record", "--pid", str(target.pid), "--async-aware", "-d", str(seconds),
                     "-o", out)
        print(f"{where} {name}: {r.stderr.strip()}")
        assert r.returncode == 0 and "panicked" not in r.stderr, r.stderr
        verify(out)
        coll = out + ".collapsed"
        assert tach("export", "--collapsed", "-o", coll, out).returncode == 0
        return collapsed_stacks(coll), r.stderr

    # Three of six working tasks named by a float (written into the task): their
    # samples are dropped and counted, the others recorded.
    stacks, err = run(BAD_NAMES, "badname.py", 2)
    dropped, error_pct = summary_errors(err)
    assert dropped > 0 and error_pct > 0, err
    names = {t for frames, _ in stacks for t in tasks_of(frames)}
    assert {"fine-0", "fine-1", "fine-2"} <= names, names
    assert not any(n.startswith(("odd-", "1.5", "2.5", "3.5")) for n in names), names
    # 10,000 waiting tasks, short ones created and finished, the loop closed and opened
    # again every half second: a valid file, the short tasks under their own frames.
    stacks, err = run(FAULTS, "faults.py", 3)
    assert summary_errors(err)[1] < 20, err
    assert any("burst" in funcs_of(frames) and len(tasks_of(frames)) == 1
               for frames, _ in stacks), stacks[:5]
    # No asyncio: every sample as without the flag.
    stacks, _ = run(PLAIN, "plain.py", 2)
    assert sum(n for _, n in stacks) > 100
    assert not any(tasks_of(frames) for frames, _ in stacks)
    assert any("work" in funcs_of(frames) for frames, _ in stacks)


GC_CHURN = """\
import asyncio, gc, sys

class Node:
    def __init__(self):
        self.ref = self

async def churn():
    while True:
        for _ in range(2000):
            Node()
        await asyncio.sleep(0)

async def main(seconds):
    gc.set_threshold(50)
    t = asyncio.create_task(churn(), name="churn")
    print("ready", flush=True)
    await asyncio.sleep(seconds)
    t.cancel()

asyncio.run(main(float(sys.argv[1])))
"""


@pytest.mark.parametrize("where", WHERE)
def test_task_stacks_have_no_gc_frame(where, work):
    """A task making cyclic garbage all the time: without the flag, recorded at the same
    time, 37-52% of the samples are in the collector (`<GC>` on top); with it, the
    task's stacks have no `<GC>` frame, as CPython's async-aware stacks have none (3.14+
    too). A stack with no task keeps its `<GC>`, as without the flag. (Before the
    change, 350 of 987 samples under the task had a `<GC>` frame, on 3.12.)"""
    cmd = interpreter(where)
    with ReadyProgram(cmd, work, GC_CHURN, 8, name="gc_churn.py", timeout=TIMEOUT) as target:
        plain_out = os.path.join(work, "plain.tach")
        plain = subprocess.Popen([TACH, "record", "--pid", str(target.pid), "-d", "2", "-o",
                                  plain_out], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        stacks, _, summary = record(target.pid, os.path.join(work, "gc.tach"), 2)
        _, plain_err = plain.communicate(timeout=TIMEOUT)
    assert plain.returncode == 0, plain_err
    assert tach("export", "--collapsed", "-o", plain_out + ".c", plain_out).returncode == 0
    plain_stacks = collapsed_stacks(plain_out + ".c")
    in_gc = sum(n for frames, n in plain_stacks if any(f.startswith("<GC>") for f in frames))
    total = sum(n for _, n in stacks)
    tasked = sum(n for frames, n in stacks if tasks_of(frames) == ["churn"])
    # Only a task's stack loses `<GC>`: a stack with no task (the loop's own code between
    # two steps, run when the collection began) keeps it, as it would without the flag.
    with_gc = [(frames, n) for frames, n in stacks
               if tasks_of(frames) and any(f.startswith("<GC>") for f in frames)]
    print(f"{where}: {summary.strip()}\nwithout the flag {in_gc} of "
          f"{sum(n for _, n in plain_stacks)} in <GC>; with it {sum(n for _, n in with_gc)} "
          f"of {tasked} under the task")
    assert in_gc >= 0.05 * sum(n for _, n in plain_stacks), plain_stacks[:5]
    assert tasked >= 0.9 * total, stacks[:5]
    assert not with_gc, with_gc[:5]


# Two named tasks calling into C: zlib's deflate and hashlib's SHA-256 (the program
# test_record.py records in-process).
with open(os.path.join(os.path.dirname(__file__), "..", "..", "data", "native", "tasks.py")) as _f:
    NATIVE_TASKS = _f.read()


def record_native_and_alone(cmd, work, seconds):
    """One execution of NATIVE_TASKS recorded at once by `--native --async-aware` and by
    `--async-aware` alone: (its stacks, the other's collapsed file, the summary line)."""
    target = ReadyProgram(cmd, work, NATIVE_TASKS, seconds + 4, name="aio_c.py",
                          timeout=TIMEOUT)
    alone_out = os.path.join(work, "alone.tach")
    out = os.path.join(work, "native.tach")
    try:
        alone = subprocess.Popen([TACH, "record", "--pid", str(target.pid), "--async-aware",
                                  "-r", "200", "-d", str(seconds), "-o", alone_out],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        r = tach("record", "--pid", str(target.pid), "--native", "--async-aware", "-r", "200",
                 "-d", str(seconds), "-o", out)
        _, alone_err = alone.communicate(timeout=TIMEOUT)
    finally:
        target.stop()
    assert r.returncode == 0, r.stderr
    assert alone.returncode == 0, alone_err
    for f in (out, alone_out):
        e = tach("export", "--collapsed", "-o", f + ".collapsed", f)
        assert e.returncode == 0, e.stderr
    return collapsed_stacks(out + ".collapsed"), alone_out + ".collapsed", r.stderr


@pytest.mark.parametrize("where", ["pyenv-3.11", "pyenv-3.12", "pyenv-3.13"])
def test_native_frames_under_the_running_task(where, work):
    """`--native --async-aware` on 3.11-3.13 (`running`): each task's C calls have its
    `<task>` frame as their root, right above its coroutine, and the native frames under
    the Python function calling them; with native frames left out, the stacks are those
    of `--async-aware` alone recording the same execution at the same time. Two samplers
    taking turns on one process, each ~1,500 samples: shares near 85% differ by about 1.3
    points (one standard error) from sampling alone, and a first run here gave 1.05 and
    3.05 points on 5 s; so 3 points (test_native.py's bound for two samplers), and a
    second execution when the first is over it. About 12 s each (24 s retried)."""
    from test_async import compare, native_frame, without_native, write_collapsed
    cmd = interpreter(where)
    for attempt in (1, 2):
        run = os.path.join(work, f"attempt-{attempt}")
        os.makedirs(run, exist_ok=True)
        stacks, alone, summary = record_native_and_alone(cmd, run, 8)
        total = sum(n for _, n in stacks)
        in_c = collections.Counter()
        for frames, n in stacks:
            fs = funcs_of(frames)
            for task, coro, func in [("squeeze", "squeeze", "compress"),
                                     ("hash", "hash_", "digest")]:
                if func in fs and native_frame(frames[-1]):
                    # Root to leaf: the task, its coroutine, the function, then native
                    # frames.
                    assert frames[0].startswith(f"<task>:{task}:") and fs[1] == coro, frames
                    at = fs.index(func)
                    assert all(native_frame(f) for f in frames[at + 1:]), frames
                    in_c[task] += n
        print(f"{where}: {summary.strip()}\nin C under each task: {dict(in_c)} of {total}")
        assert in_c["squeeze"] > 0.1 * total and in_c["hash"] > 0.1 * total, (in_c, total)
        report, worst, missing, _, _ = compare(
            alone, write_collapsed(without_native(stacks), os.path.join(run, "python")))
        print(f"{report}\nlargest difference {worst:.2f} points")
        if worst <= 3.0 and not missing:
            break
    assert worst <= 3.0 and not missing, report
