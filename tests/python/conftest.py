"""pytest setup for every Python test (this folder: exporters, Parquet, SQL, Spark;
recorder/: the recorder on many interpreters; package/: the installed wheels) and the
helpers the test files share (import them with ``from conftest import ...``).

Only the standard library and pytest are imported here: the recorder tests run this file
on CPython 3.10-3.15 (some in the CPython chroot) and the wheel tests in a venv that holds
nothing but the wheel and pytest."""
import glob
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The tach binary the tests run: TACH_BIN when set (the runners set it), else the debug
# build in CARGO_TARGET_DIR (default target/).
TACH = os.environ.get("TACH_BIN") or os.path.join(
    os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target"), "debug", "tach")
CHROOT = os.path.join(REPO, "scripts", "cpython-chroot")
GOLDEN = Path(REPO) / "golden" / "cpython-3.15.2"
NAMES = sorted(p.name[:-4] for p in GOLDEN.glob("*.bin"))


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "front_end: checks the recorder's options, files and exit paths, which no interpreter "
        "layout changes; run on the host's CPython, the oldest and the newest in-process "
        "(tests/python/run_all.sh), not again on each version between")


def pytest_runtest_logreport(report):
    """Writes every skipped test to TACH_SKIP_LOG (when set), so that scripts/test-all
    ends with a summary of what did not run and why."""
    log = os.environ.get("TACH_SKIP_LOG")
    if report.skipped and log:
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        with open(log, "a") as f:
            f.write(f"SKIPPED: {report.nodeid}: {why}\n")


def skip_loudly(why):
    """Says a check did not run, on stderr and as a pytest skip (which the hook above
    writes to TACH_SKIP_LOG for scripts/test-all's closing summary)."""
    print(f"SKIPPED: {why}", file=sys.stderr)
    pytest.skip(why)


# --- The CPython chroot (scripts/cpython-chroot) --------------------------------------

def chroot_ok():
    """Whether the CPython chroot is set up and runs."""
    if not os.path.exists(CHROOT):
        return False
    return subprocess.run([CHROOT, "run", "--", "true"], cwd=REPO, capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def chroot():
    """Runs a command in the CPython chroot; skips LOUDLY when it is unavailable."""
    probe = subprocess.run([CHROOT, "run", "--", "true"], cwd=REPO,
                           capture_output=True, text=True)
    if probe.returncode == 3:
        skip_loudly(f"chroot: the CPython chroot is not available ({probe.stderr.strip()}); "
                    "CPython interop checks not run")
    assert probe.returncode == 0, f"{CHROOT} failed: {probe.stderr}"

    def run(*args):
        return subprocess.run([CHROOT, "run", "--", *args], cwd=REPO,
                              capture_output=True, text=True)

    return run


# --- Exports of the golden corpus -----------------------------------------------------

def golden_bytes(name, suffix):
    """A CPython output from the golden corpus, gunzipped if stored as .gz."""
    plain = GOLDEN / f"{name}{suffix}"
    if plain.exists():
        return plain.read_bytes()
    return gzip.decompress((GOLDEN / f"{name}{suffix}.gz").read_bytes())


def built_tach():
    """The tach binary's path; the test skips loudly when it is not built."""
    if not os.path.exists(TACH):
        skip_loudly(f"{TACH} not built (cargo build)")
    return TACH


@pytest.fixture(scope="session")
def tach_bin():
    """The tach binary (a Path), built first when it is the debug build of this checkout."""
    if not os.environ.get("TACH_BIN"):
        subprocess.run(["cargo", "build", "--quiet", "--bin", "tach"], cwd=REPO, check=True)
    exe = Path(TACH)
    assert exe.exists(), f"{exe} not built"
    return exe


@pytest.fixture(scope="session")
def workdir():
    # Under the repository (below /work), so the chroot sees it at the same path.
    d = tempfile.mkdtemp(prefix=".pytest-export-", dir=REPO)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


_EXT = {"pstats": ".pstats", "jsonl": ".jsonl", "gecko": ".gecko.json"}


@pytest.fixture(scope="session")
def exported(tach_bin, workdir):
    """exported(fmt) -> {name: path of our export of NAME.bin}."""
    cache = {}

    def get(fmt):
        if fmt not in cache:
            out = workdir / fmt
            out.mkdir()
            bins = [str(GOLDEN / f"{n}.bin") for n in NAMES]
            subprocess.run([str(tach_bin), "export", f"--{fmt}", "--out-dir", str(out), *bins],
                           check=True, stdout=subprocess.DEVNULL)
            cache[fmt] = {n: out / f"{n}{_EXT[fmt]}" for n in NAMES}
            for n, p in cache[fmt].items():
                assert p.exists(), f"batch export wrote no {p}"
        return cache[fmt]

    return get


# --- Recorder targets and their output ------------------------------------------------

@pytest.fixture
def work(request):
    """A scratch directory under the checkout's target/ (the chroot sees only the
    checkout), named after the test module, removed afterwards."""
    os.makedirs(os.path.join(REPO, "target"), exist_ok=True)
    prefix = request.module.__name__.removeprefix("test_").replace("_", "-") + "-"
    d = tempfile.mkdtemp(prefix=prefix, dir=os.path.join(REPO, "target"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


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


def line_in_text(text, marker):
    """The line number of the first line of `text` with `marker`."""
    for i, line in enumerate(text.splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"{marker!r} not in the text")


def line_in_file(path, marker):
    """The line number of the first line of the file at `path` with `marker`."""
    try:
        return line_in_text(Path(path).read_text(), marker)
    except AssertionError:
        raise AssertionError(f"{marker!r} not in {path}") from None


def run_tach(*args, timeout, cwd=REPO):
    """Runs the tach binary (TACH) with `args`; the CompletedProcess, output as text."""
    if not os.path.exists(TACH):
        pytest.fail(f"no tach binary at {TACH} (cargo build, or set TACH_BIN)")
    return subprocess.run([TACH, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def pyenv_python(minor):
    """The newest of pyenv's CPython 3.`minor` here, or None."""
    found = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}.*/bin/python3.{minor}")))
    return found[-1] if found else None


def installed_pyspy(what):
    """py-spy's path, installed from PyPI beside this interpreter when missing; the test
    skips (loudly, naming `what`) when it cannot be installed."""
    exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(exe):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=False)
    if not os.path.exists(exe):
        pytest.skip(f"SKIPPED: {what}: py-spy could not be installed from PyPI")
    return exe


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


def collapsed_counts(path):
    """{stack line (frames root first, `;`-separated): samples} of a collapsed file,
    lines of the same stack summed."""
    counts = {}
    with open(path) as f:
        for line in f:
            stack, n = line.rstrip("\n").rsplit(" ", 1)
            counts[stack] = counts.get(stack, 0) + int(n)
    return counts


def collapsed_stacks(path):
    """[(frames root first, samples)] of a collapsed file, lines of the same stack summed
    and the `tid:` element left out."""
    return [([fr for fr in stack.split(";") if not fr.startswith("tid:")], n)
            for stack, n in collapsed_counts(path).items()]


def in_order(names, *wanted):
    """`wanted` appear in `names` in this order (root to leaf), not necessarily adjacent."""
    at = 0
    for w in wanted:
        try:
            at = names.index(w, at) + 1
        except ValueError:
            return False
    return True
