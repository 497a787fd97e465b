"""pytest setup for the recorder and API tests, and the helpers the test files share
(import them with ``from conftest import ...``)."""
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from skiplog import pytest_runtest_logreport  # noqa: F401  (a pytest hook)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TACH = os.environ.get("TACH_BIN") or os.path.join(REPO, "target", "debug", "tach")
CHROOT = os.path.join(REPO, "scripts", "cpython-chroot")


@pytest.fixture
def work(request):
    """A scratch directory under the checkout's target/ (the chroot sees only the
    checkout), named after the test module, removed afterwards."""
    os.makedirs(os.path.join(REPO, "target"), exist_ok=True)
    prefix = request.module.__name__.removeprefix("test_").replace("_", "-") + "-"
    d = tempfile.mkdtemp(prefix=prefix, dir=os.path.join(REPO, "target"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def chroot_ok():
    """Whether the CPython chroot (scripts/cpython-chroot) is set up and runs."""
    if not os.path.exists(CHROOT):
        return False
    return subprocess.run([CHROOT, "run", "--", "true"], cwd=REPO, capture_output=True).returncode == 0


# A main thread in pure Python (leaf called by middle, each line marked) and a sleeping
# thread: `python THREADS_MIXED SECONDS [STATUS]`; "ready" once both run.
THREADS_MIXED = """\
import sys, threading, time

def leaf(n):
    s = 0
    for i in range(n):
        s += i * i  # LEAF
    return s

def middle():
    return leaf(20000)  # MIDDLE

def sleeper(stop):
    while not stop.is_set():
        time.sleep(0.02)  # SLEEP

stop = threading.Event()
threading.Thread(target=sleeper, args=(stop,), name="sleeper").start()
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    middle()  # LOOP
stop.set()
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
"""


def line_of(text, marker):
    """The line number of the first line of `text` with `marker`."""
    for i, line in enumerate(text.splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"{marker!r} not in the text")


class ReadyProgram:
    """`text` written to `work/name` and run as `cmd + [script, seconds]` until it prints
    "ready"; `pid` is then its interpreter's (the chroot's wrapper may fork it). Killed
    on leaving the `with` block (or at `stop()`) if it still runs."""

    def __init__(self, cmd, work, text, seconds, name="target.py", timeout=120):
        self.script = os.path.join(work, name)
        with open(self.script, "w") as f:
            f.write(text)
        self.timeout = timeout
        self.proc = subprocess.Popen(cmd + [self.script, str(seconds)], cwd=REPO,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        sys.path.insert(0, os.path.join(REPO, "python", "bench"))
        import accuracy  # python/bench/accuracy.py: its search for the target's pid

        self.pid = accuracy.wait_for_child_python(None, self.script)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=self.timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def read_collapsed(path):
    """{stack line (frames root first, `;`-separated): samples} of a collapsed file,
    lines of the same stack summed."""
    counts = {}
    with open(path) as f:
        for line in f:
            stack, n = line.rstrip("\n").rsplit(" ", 1)
            counts[stack] = counts.get(stack, 0) + int(n)
    return counts


def in_order(names, *wanted):
    """`wanted` appear in `names` in this order (root to leaf), not necessarily adjacent."""
    at = 0
    for w in wanted:
        try:
            at = names.index(w, at) + 1
        except ValueError:
            return False
    return True
