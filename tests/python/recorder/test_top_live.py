"""`tach top --pid PID` and `tach top -- python app.py`: the live view, driven for real.

Each test runs the view in a tmux session of its own (its own server socket), types
keys with ``send-keys`` and reads the screen with ``capture-pane``. Targets run on the
host's pyenv CPython 3.13 and, where the CPython chroot is available, the chroot's
Debian CPython 3.15 (the host's tach reads a process in the chroot through
/proc/PID/root; for the ``-- python`` form tach runs in the chroot too). One of the
accuracy harness's real PyPI programs (pygments) runs under the ``-- python`` form.

Run by tests/python/run_all.sh, with TACH_BIN naming the tach binary (default
target/debug/tach). Without tmux (and no way to install it) every test skips, loudly.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import CHROOT, REPO, TACH, THREADS_MIXED, ReadyProgram, chroot_ok, pyenv_python

sys.path.insert(0, os.path.join(REPO, "python", "bench"))
import accuracy  # noqa: E402  (python/bench/accuracy.py)
WAIT = 60

TARGET = THREADS_MIXED


def have_tmux():
    """tmux, installed with apt-get when it is missing and we may."""
    if shutil.which("tmux"):
        return True
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "tmux"], capture_output=True, timeout=600)
    return shutil.which("tmux") is not None


def pyenv313():
    python = os.path.expanduser("~/.pyenv/versions/3.13.0/bin/python3.13")
    return python if os.path.exists(python) else None


def interpreters():
    """(id, command prefix, in the chroot) for every interpreter the view is tested on."""
    host = pyenv313()
    have_chroot = chroot_ok()
    return [
        ("host-3.13", [host] if host else None, False),
        ("chroot-3.15", [CHROOT, "run", "--", "python3.15"] if have_chroot else None, True),
    ]


INTERPRETERS = interpreters()
IDS = [i[0] for i in INTERPRETERS]


def need(interp):
    name, cmd, _ = interp
    if not have_tmux():
        pytest.skip("SKIPPED: tach top live view: no tmux here, and apt-get could not install it")
    if cmd is None:
        pytest.skip(f"SKIPPED: tach top live view on {name}: that interpreter is not available here")
    if not os.path.exists(TACH):
        pytest.fail(f"no tach binary at {TACH} (cargo build, or set TACH_BIN)")
    return cmd


class Tmux:
    """A tmux server of our own running a plain sh in a 200x50 window."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="tach-tmux-")
        self.sock = os.path.join(self.dir, "sock")
        p = self.tmux("new-session", "-d", "-x", "200", "-y", "50", "env PS1='$ ' sh")
        assert p.returncode == 0, p.stderr

    def tmux(self, *args):
        return subprocess.run(["tmux", "-S", self.sock, "-f", "/dev/null", *args],
                              capture_output=True, text=True, timeout=30)

    def type(self, line):
        """Types a command line and Enter."""
        self.tmux("send-keys", "-l", line)
        self.tmux("send-keys", "Enter")

    def keys(self, *keys):
        self.tmux("send-keys", *keys)

    def screen(self):
        return self.tmux("capture-pane", "-p").stdout

    def wait(self, what, pred, timeout=WAIT):
        """The first screen for which pred holds; fails showing the last one."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.screen()
            if pred(s):
                return s
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}; the screen:\n{s}")
            time.sleep(0.2)

    def close(self):
        self.tmux("kill-server")
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def tmux():
    t = Tmux()
    yield t
    t.close()


ROW = re.compile(r"^\s*(\d+)/(\d+)\s+([\d.]+)\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+(.*?)\s*$")
HEADER = re.compile(r"tach top\s+pid (\d+)\s+rate (\d+) Hz\s+samples (\d+)\s+elapsed ([\d.]+) s\s+"
                    r"errors (\d+) \(([\d.]+)% of ticks\)")


def header(screen):
    m = HEADER.search(screen)
    assert m, screen
    return {"pid": int(m[1]), "rate": int(m[2]), "samples": int(m[3]), "errors": int(m[5]),
            "error_pct": float(m[6])}


def samples(screen):
    """The header's sample count; -1 while there is no header (a screen being drawn)."""
    m = HEADER.search(screen)
    return int(m[3]) if m else -1


def rows(screen):
    """The table's rows: (function, file, self, total, self%, total%), top to bottom."""
    lines = screen.splitlines()
    start = next((i for i, line in enumerate(lines) if "self/total" in line), None)
    out = []
    if start is None:
        return out
    for line in lines[start + 1:]:
        m = ROW.match(line)
        if not m:
            break
        label = m[5]
        func = re.search(r"\(([^()]*)\)$", label)
        out.append((func[1] if func else label, label[:func.start()] if func else label,
                    int(m[1]), int(m[2]), float(m[3]), float(m[4])))
    return out


def funcs(screen):
    return [r[0] for r in rows(screen)]


def info(screen):
    """The line under the header: thread, sort, grouping, status mix ("" when none)."""
    return next((line for line in screen.splitlines() if line.startswith("thread ")), "")


def table_text(screen):
    """The table's rows as shown ("" when there is no table)."""
    lines = screen.splitlines()
    start = next((i for i, line in enumerate(lines) if "self/total" in line), len(lines))
    return "\n".join(line for line in lines[start:] if ROW.match(line))


def quit_and_check_terminal(tmux, status):
    """q ends the view with `status`, the shell's screen is back (the alternate screen
    is left) and the terminal is in cooked mode with echo again."""
    tmux.keys("q")
    s = tmux.wait(f"EXIT={status}", lambda s: re.search(r"^EXIT=\d+", s, re.M))
    assert re.search(rf"^EXIT={status}$", s, re.M), s
    assert "self/total" not in s and "q quit" not in s, s
    tmux.type("stty -a | tr ' ;' '\\n\\n' | grep -x -e -icanon -e icanon -e -echo -e echo | tr '\\n' ' '; echo")
    s = tmux.wait("stty's answer", lambda s: re.search(r"^-?icanon -?echo\s*$", s, re.M))
    assert re.search(r"^icanon echo\s*$", s, re.M), s


@pytest.mark.parametrize("interp", INTERPRETERS, ids=IDS)
def test_live_view_of_a_running_process(interp, work, tmux):
    cmd = need(interp)
    with ReadyProgram(cmd, work, TARGET, 120, timeout=WAIT) as t:
        tmux.type(f"{TACH} top --pid {t.pid} -a; echo EXIT=$?")
        # The hot functions: the main thread's leaf and the other thread's sleeper.
        s = tmux.wait("both threads' hot functions",
                      lambda s: samples(s) > 1500
                      and {"leaf", "sleeper"} <= set(funcs(s)[:2]))
        h = header(s)
        assert (h["pid"], h["rate"]) == (t.pid, 1000), s
        assert h["error_pct"] < 5, s
        r = {f[0]: f for f in rows(s)}
        assert r["leaf"][1] == t.script and r["sleeper"][1] == t.script, s
        # Wall mode, every thread: each about half of the samples.
        assert 30 < r["leaf"][4] < 70 and 30 < r["sleeper"][4] < 70, s
        assert info(s).startswith("thread all (2)  sort self  by function"), s
        assert re.search(r"GIL \d+\.\d%  GIL wait \d+\.\d%  on CPU n/a \(--mode cpu\)  exception 0\.0%", s), s

        # The thread filter: the main thread alone, then the other one, then all again.
        tmux.keys("Right")
        s = tmux.wait("the main thread", lambda s: info(s).startswith(f"thread {t.pid} (main)"))
        assert funcs(s)[0] == "leaf" and "sleeper" not in funcs(s), s
        tmux.keys("Right")
        s = tmux.wait("the other thread", lambda s: re.match(r"thread \d+  ", info(s)))
        assert funcs(s)[0] == "sleeper" and "leaf" not in funcs(s), s
        assert rows(s)[0][4] > 99, s
        tmux.keys("a")
        tmux.wait("every thread", lambda s: info(s).startswith("thread all (2)"))

        # Sort keys, on the main thread: self puts leaf first, total <module> (on every
        # stack), name orders the rows by file and function.
        tmux.keys("Right")
        tmux.wait("the main thread", lambda s: info(s).startswith(f"thread {t.pid} (main)"))
        tmux.keys("t")
        s = tmux.wait("sort by total", lambda s: "sort total" in info(s))
        main = funcs(s)
        assert main[0] == "<module>", s
        assert {"leaf", "middle"} <= set(main[:3]), s
        totals = [r[3] for r in rows(s)]
        assert totals == sorted(totals, reverse=True), s
        tmux.keys("n")
        s = tmux.wait("sort by name", lambda s: "sort name" in info(s))
        keys = [(r[1], r[0]) for r in rows(s)]
        assert keys == sorted(keys) and len(keys) >= 3, s
        tmux.keys("s")
        s = tmux.wait("sort by self", lambda s: "sort self" in info(s))
        assert funcs(s)[0] == "leaf", s
        selfs = [r[2] for r in rows(s)]
        assert selfs == sorted(selfs, reverse=True), s

        # The status mix per thread.
        tmux.keys("m")
        s = tmux.wait("the status panel", lambda s: "GIL wait  on CPU exception" in s)
        assert re.search(rf"{t.pid} \(main\)\s+\d+\s+[\d.]+%", s), s

        # Pause: the table stands still while the header's counters go on.
        tmux.keys("p")
        s = tmux.wait("PAUSED", lambda s: "PAUSED" in s)
        frozen, before = table_text(s), samples(s)
        time.sleep(2.5)
        s = tmux.wait("a whole screen", lambda s: samples(s) > before)
        assert "PAUSED" in s and table_text(s) == frozen, s
        assert samples(s) > before + 500, s
        tmux.keys("p")
        tmux.wait("the table moving again",
                  lambda s: samples(s) > 0 and "PAUSED" not in s and table_text(s) not in ("", frozen))

        quit_and_check_terminal(tmux, 0)
        # Detached: the process runs on.
        assert t.proc.poll() is None


@pytest.mark.parametrize("interp", INTERPRETERS, ids=IDS)
def test_started_program_exits_and_the_last_table_stays(interp, work, tmux):
    """`tach top -o OUT -- python app.py`: when the program exits, the view says so and
    keeps its table, which is the table `tach top OUT` prints; q exits with the
    program's status."""
    cmd = need(interp)
    script = os.path.join(work, "target.py")
    with open(script, "w") as f:
        f.write(TARGET)
    out = os.path.join(work, "out.tach")
    line = f"{TACH} top -a -o {out} -- {cmd[-1]} {script} 4 7"
    if interp[2]:
        line = f"{CHROOT} run -- {line}"
    tmux.type(f"{line}; echo EXIT=$?")
    s = tmux.wait("the program's exit", lambda s: "the program exited with status 7; q quits" in s)
    assert {"leaf", "sleeper"} <= set(funcs(s)[:2]), s
    live = table_text(s)
    # One code path: the live table is the printed table of the same samples.
    printed = subprocess.run([TACH, "top", "-l", str(len(rows(s))), out], capture_output=True,
                             text=True, timeout=WAIT)
    assert printed.returncode == 0, printed.stderr
    assert "\n".join(printed.stdout.splitlines()[2:]) == live
    tmux.keys("q")
    s = tmux.wait("EXIT", lambda s: re.search(r"^EXIT=\d+", s, re.M))
    assert re.search(r"^EXIT=7$", s, re.M), s
    assert re.search(r"tach: [\d,]+ samples in .* written to " + re.escape(out), s), s
    assert "tach: the program's output (its last 1 lines):\nready" in s, s


def test_real_program_then_quit_interrupts_it(work, tmux):
    """The accuracy harness's pygments program (a real PyPI package) under `tach top --
    python`: its hot functions show; q while it runs interrupts it (SIGINT, so
    KeyboardInterrupt) and tach exits with its status."""
    cmd = need(INTERPRETERS[0])
    lib = os.path.join(REPO, ".venv-accuracy", "lib")
    try:
        accuracy.install_lib(lib)
    except Exception as e:  # no network, no pip
        pytest.skip(f"SKIPPED: tach top on pygments: cannot install the harness's packages ({e})")
    driver = os.path.join(work, "accuracy_pygments.py")
    with open(driver, "w") as f:
        f.write(accuracy.PROGRAMS["pygments"] + accuracy.DRIVER_TAIL)
    tmux.type(f"PYTHONPATH={lib} {TACH} top -- {cmd[0]} {driver} 120; echo EXIT=$?")
    s = tmux.wait("pygments at work", lambda s: samples(s) > 2000
                  and any("/pygments/" in r[1] for r in rows(s)[:5]))
    tmux.keys("t")
    tmux.wait("sort by total", lambda s: "sort total" in info(s))

    def working(s):
        # Every sample after the set-up (imports) is in work -> unit -> highlight.
        top = {r[0]: r for r in rows(s)[:8]}
        return all(f in top and top[f][5] > 50 for f in ("work", "unit", "highlight"))

    tmux.wait("work, unit and highlight on top", working)
    tmux.keys("q")
    s = tmux.wait("EXIT", lambda s: re.search(r"^EXIT=\d+", s, re.M))
    # Python dies of the SIGINT it re-raises after KeyboardInterrupt: 128 + 2.
    assert re.search(r"^EXIT=130$", s, re.M), s
    assert "KeyboardInterrupt" in s, s


def test_a_terminal_that_hangs_up_ends_the_view_cleanly(work, tmux):
    """The terminal closes under the view (tmux killed: SIGHUP): tach finishes the file
    (no journal left), stops, and the started program does not run on."""
    cmd = need(INTERPRETERS[0])
    script = os.path.join(work, "target.py")
    with open(script, "w") as f:
        f.write(TARGET)
    out = os.path.join(work, "out.tach")
    tmux.type(f"{TACH} top -o {out} -- {cmd[0]} {script} 120")
    tmux.wait("the table", lambda s: "leaf" in funcs(s))
    tmux.tmux("kill-server")
    deadline = time.monotonic() + WAIT
    running = lambda: subprocess.run(["pgrep", "-f", script], capture_output=True).returncode == 0  # noqa: E731
    while running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not running(), "tach top or its program still runs after the terminal hung up"
    assert not os.path.exists(out + ".journal")
    v = subprocess.run([TACH, "verify", out], capture_output=True, text=True, timeout=WAIT)
    assert v.returncode == 0, v.stdout + v.stderr


def test_errors_are_those_of_tach_record(work, tmux):
    """Not Python, no such process, unsupported version, permission denied: the same
    message as `tach record --pid`, exit status 1; without a terminal, a usage error."""
    if not have_tmux():
        pytest.skip("SKIPPED: tach top live view: no tmux here, and apt-get could not install it")
    sleeper = subprocess.Popen(["sleep", "60"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    # (pid, command prefix, whether the error is certain)
    cases = [(sleeper.pid, [], True), (gone.pid, [], True)]
    # An interpreter tach cannot record from outside (3.8 and older), if this machine
    # has one.
    old = None
    for minor in (8, 7):
        found = pyenv_python(minor)
        if found:
            old = subprocess.Popen([found, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                                   stdout=subprocess.PIPE, text=True)
            assert old.stdout.readline().strip() == "ready"
            cases.append((old.pid, [], True))
            break
    # Permission denied: root's process read by nobody.
    if os.geteuid() == 0 and shutil.which("setpriv"):
        nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
        cases.append((sleeper.pid, nobody, True))
    try:
        checked = 0
        for n, (pid, prefix, certain) in enumerate(cases):
            rec = subprocess.run(prefix + [TACH, "record", "--pid", str(pid), "-d", "1", "-o", "/dev/null"],
                                 capture_output=True, text=True, timeout=WAIT)
            if rec.returncode == 0 and not certain:
                continue  # that version is recorded from outside now: not an error
            assert rec.returncode == 1 and rec.stderr.startswith("tach: "), rec.stderr
            tmux.type(f"clear; {' '.join(prefix)} {TACH} top --pid {pid}; echo EXIT{n}=$?")
            tmux.wait("the error", lambda s: re.search(rf"^EXIT{n}=\d+", s, re.M))
            # Wrapped lines joined: the permission error is long.
            s = tmux.tmux("capture-pane", "-p", "-J").stdout
            assert rec.stderr.strip() in s, (rec.stderr, s)
            assert re.search(rf"^EXIT{n}=1\s*$", s, re.M), s
            assert "panicked" not in s
            if prefix:
                assert "Permission denied" in s and "CAP_SYS_PTRACE" in s, s
            checked += 1
        assert checked >= 2
    finally:
        for p in (sleeper, old):
            if p is not None:
                p.kill()
                p.wait()
    p = subprocess.run([TACH, "top", "--pid", str(os.getpid())], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=WAIT)
    assert p.returncode == 2 and "need a terminal" in p.stderr, p.stderr


@pytest.mark.parametrize("mode", ["running", "all"])
def test_async_aware_live_view_shows_the_tasks(mode, work, tmux):
    """`tach top --async-aware --pid PID` on the chroot's CPython 3.15, on test_async.py's
    tree of tasks (main's TaskGroup runs mid-0..2, each gathers three leaf tasks awaiting
    a deepest-N task that does the work, and a `timer` task waits): the view lists each
    task as a function of file <task>; by total, Task-1 holds the mid tasks, which split
    it between them. `running` shows the tasks on the CPU only, `all` the waiting timer
    too (`running` only when a sample falls in one of its two short steps). The last
    table is the one `tach top OUT` prints."""
    from test_async import TREE

    cmd = need(INTERPRETERS[1])
    script = os.path.join(work, "aio_tree.py")
    with open(script, "w") as f:
        f.write(TREE)
    out = os.path.join(work, "out.tach")
    proc = subprocess.Popen(cmd + [script, "6"], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        pid = accuracy.wait_for_child_python(None, script)
        tmux.type(f"{TACH} top --async-aware --async-mode {mode} --sort total -o {out} "
                  f"--pid {pid}; echo EXIT=$?")
        s = tmux.wait("the program's exit", lambda s: f"process {pid} exited; q quits" in s)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=WAIT)
    r = {(row[1], row[0]): row for row in rows(s)}
    root = r[("<task>", "Task-1")]
    mids = [r[("<task>", f"mid-{i}")] for i in range(3)]
    # The mid tasks share the work: each a sizeable part, together nearly all of the
    # root's samples and never more (they are under it).
    assert root[5] > 50, s
    assert all(m[3] > 0.1 * root[3] for m in mids), s
    assert 0.9 * root[3] <= sum(m[3] for m in mids) <= root[3], s
    # A task frame has no code: no self time.
    assert all(row[2] == 0 for key, row in r.items() if key[0] == "<task>"), s
    # The timer task waits all along: `all` shows it in every tick; `running` only if a
    # sample fell in one of its two steps (microseconds).
    timer = r.get(("<task>", "timer"), (0, 0, 0, 0))[3]
    assert timer > 100 if mode == "all" else timer <= 5, s
    live = table_text(s)
    printed = subprocess.run([TACH, "top", "--sort", "total", "-l", str(len(rows(s))), out],
                             capture_output=True, text=True, timeout=WAIT)
    assert printed.returncode == 0, printed.stderr
    assert "\n".join(printed.stdout.splitlines()[2:]) == live
    # Every deepest task (named by construction) is in the file's table.
    everything = subprocess.run([TACH, "top", "-l", "1000", out], capture_output=True, text=True,
                                timeout=WAIT).stdout
    for i in range(3):
        for k in range(3):
            assert f"<task>(deepest-{10 * i + k})" in everything, everything
    tmux.keys("q")
    s = tmux.wait("EXIT", lambda s: re.search(r"^EXIT=\d+", s, re.M))
    assert re.search(r"^EXIT=0$", s, re.M), s
