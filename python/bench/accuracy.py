"""Accuracy of the tach recorder on real programs, against an independent profiler.

    python python/bench/accuracy.py [--programs pyflakes,networkx,...] [--seconds 5]
                                    [--rate 1000] [--python "CMD"] [--reference pyspy|cpython]
                                    [--top 15] [--keep DIR] [--json OUT]

Each program is a pure-Python package from PyPI driven by a small script whose function
`work(seconds)` repeats a unit of CPU-bound work until the time is up. The script runs
once under `python -m tach run --no-gc` and once under the reference:

- pyspy (3.11-3.14): `py-spy record --idle --nolineno --full-filenames --format raw`,
  py-spy's default mode, which stops the process for each sample (its stacks are
  consistent). A process in the chroot is recorded by pid from the host (one pid
  namespace).
- cpython (3.15): `python3.15 -m profiling.sampling run --blocking --no-gc --collapsed`.

Shares are counted only among the samples whose stack holds the driver's `work` frame,
and only over the frames from `work` up (imports, start-up and the runpy frames of
`python -m tach run` are left out). A function is (file basename, qualified name): the
reference formats name files differently, the basename is what they share. For the 15
largest functions (by the reference's inclusive share) the table gives self and
inclusive shares side by side, and the largest gap; the recorder's own error rate comes
from its summary line.

The packages are installed with pip into DIR/lib (`--lib`, default `.venv-accuracy/lib`
under the checkout) with C speedups removed, and put on PYTHONPATH, so the same pure-Python
code runs on every interpreter (the chroot's too). The tach package must be importable by
the interpreter under test: for the host, `tests/python/run.sh` builds it into .venv; for
the chroot, pass `--tach-path python`: the abi3 extension run.sh built into python/tach/
serves every version.

With `--attach TACH --same-process`, the program runs alone and the tach binary records
it from outside (`tach record --pid`), as the reference does.

Examples:
    .venv/bin/python python/bench/accuracy.py
    .venv/bin/python python/bench/accuracy.py --same-process --attach target/debug/tach \
        --python ~/.pyenv/versions/3.13.0/bin/python3.13
    .venv/bin/python python/bench/accuracy.py --python "scripts/cpython-chroot \
        run -- python3.13" --tach-path python
    .venv/bin/python python/bench/accuracy.py --reference cpython --python \
        "scripts/cpython-chroot run -- python3.15" --tach-path python
"""

import argparse
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ["pyflakes", "networkx", "pygments", "docutils", "jinja2", "markupsafe"]

# Each program: setup code (module level, before work) and the unit of work.
PROGRAMS = {
    # A linter: pyflakes on a dozen standard-library modules.
    "pyflakes": (
        r'''
import io, importlib
import pyflakes.api, pyflakes.reporter
MODULES = ["argparse", "ast", "calendar", "configparser", "dataclasses", "difflib",
           "email.message", "inspect", "json.decoder", "pathlib", "pydoc", "typing"]
SOURCES = []
for name in MODULES:
    path = importlib.import_module(name).__file__
    with open(path, encoding="utf-8") as f:
        SOURCES.append((f.read(), path))
def unit():
    out = io.StringIO()
    rep = pyflakes.reporter.Reporter(out, out)
    for text, path in SOURCES:
        pyflakes.api.check(text, path, rep)
'''
    ),
    # A graph library: centrality and clustering on a random graph.
    "networkx": (
        r'''
import networkx as nx
G = nx.gnm_random_graph(400, 2400, seed=7)
def unit():
    nx.betweenness_centrality(G, k=40, seed=3)
    nx.clustering(G)
    list(nx.connected_components(G))
'''
    ),
    # A syntax highlighter: pygments on standard-library sources, to HTML.
    "pygments": (
        r'''
import importlib
from pygments import highlight
from pygments.lexers import PythonLexer
from pygments.formatters import HtmlFormatter
TEXT = ""
for name in ["argparse", "difflib", "inspect"]:
    with open(importlib.import_module(name).__file__, encoding="utf-8") as f:
        TEXT += f.read()
LEXER, FORMATTER = PythonLexer(), HtmlFormatter()
def unit():
    highlight(TEXT, LEXER, FORMATTER)
'''
    ),
    # A documentation renderer: docutils, reStructuredText to HTML.
    "docutils": (
        r'''
import docutils.core
parts = ["=========\nHandbook\n=========\n"]
for i in range(40):
    parts.append(f"""
Section {i}
==========

Some *emphasis*, **strong** text, ``literal`` and a `link <https://example.org/{i}>`_.
A reference to Section_ {i} and a footnote [#]_.

- item one with *markup*
- item two

  1. nested enumerated
  2. list items

.. [#] The footnote {i}.

=====  =====  ======
  A      B    A or B
=====  =====  ======
False  False  False
True   False  True
=====  =====  ======

.. note:: An admonition with ``code`` in section {i}.

::

    literal block {i}
    more lines
""")
TEXT = "".join(parts)
SETTINGS = {"report_level": 5, "halt_level": 5, "output_encoding": "unicode"}
def unit():
    docutils.core.publish_string(TEXT, writer_name="html", settings_overrides=SETTINGS)
'''
    ),
    # A template engine: jinja2, loops, filters, macros, inheritance (no autoescape).
    "jinja2": (
        r'''
import jinja2
LOADER = jinja2.DictLoader({
    "base.html": "<html><body>{% block body %}{% endblock %}</body></html>",
    "page.html": """{% extends "base.html" %}
{% macro row(u) %}<tr><td>{{ u.name|title }}</td><td>{{ u.mail|lower }}</td>
<td>{{ u.tags|join(", ") }}</td><td>{{ "%.2f"|format(u.score) }}</td></tr>{% endmacro %}
{% block body %}<table>{% for u in users if u.active %}{{ row(u) }}
{% if loop.index is divisibleby 10 %}<tr><td>{{ loop.index }}</td></tr>{% endif %}
{% endfor %}</table>{% endblock %}""",
})
ENV = jinja2.Environment(loader=LOADER, autoescape=False)
TEMPLATE = ENV.get_template("page.html")
USERS = [dict(name=f"user number {i}", mail=f"User{i}@Example.ORG", active=i % 7 != 0,
              tags=[f"t{j}" for j in range(i % 5)], score=i * 1.25) for i in range(300)]
def unit():
    TEMPLATE.render(users=USERS)
'''
    ),
}

# Native-heavy programs (`--native`): most of their time is in C (numpy's LAPACK and
# OpenBLAS, zlib, the json and re accelerators, libc's qsort calling back into Python
# through ctypes). numpy must be importable by the interpreter under test; OpenBLAS is
# held to the main thread, the one both profilers sample.
NATIVE_PROGRAMS = {
    "svd": (
        r'''
import os
os.environ["OPENBLAS_NUM_THREADS"] = "1"
import numpy as np
RNG = np.random.default_rng(1)
A = RNG.standard_normal((160, 120))
V = RNG.standard_normal(400_000)
def unit():
    np.linalg.svd(A)
    np.sort(V)
'''
    ),
    "zlib": (
        r'''
import zlib, random
random.seed(1)
DATA = " ".join(random.choice(["alpha", "beta", "gamma", "delta", "%d" % i])
                for i in range(60_000)).encode()
def unit():
    zlib.decompress(zlib.compress(DATA, 9))
'''
    ),
    "json": (
        r'''
import json
DOC = [{"id": i, "name": f"item {i}", "tags": ["a", "b", str(i)], "price": i * 0.5,
        "nested": {"k": [1, 2, 3], "ok": i % 2 == 0}} for i in range(3000)]
def unit():
    json.loads(json.dumps(DOC))
'''
    ),
    "regex": (
        r'''
import re, random
random.seed(2)
TEXT = " ".join(random.choice(["foo@example.org", "bar", "x1y2", "mail baz@test.net",
                               "qux"]) for _ in range(40_000))
MAIL = re.compile(r"[\w.]+@[\w]+\.(?:org|net)")
def unit():
    sum(1 for _ in MAIL.finditer(TEXT))
'''
    ),
    # A Rust extension from PyPI (orjson: PyO3, its wheel stripped to its exports).
    "orjson": (
        r'''
import orjson
DOC = [{"id": i, "name": f"item {i}", "tags": ["a", "b", str(i)], "price": i * 0.5,
        "nested": {"k": [1, 2, 3], "ok": i % 2 == 0}} for i in range(3000)]
def unit():
    for _ in range(5):
        orjson.loads(orjson.dumps(DOC))
'''
    ),
    "qsort": (
        r'''
import ctypes, ctypes.util, random
LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
def compare(a, b):
    return a[0] - b[0]
COMPARE = CMP(compare)
random.seed(3)
VALUES = [random.randrange(1 << 20) for _ in range(4000)]
def unit():
    arr = (ctypes.c_int * len(VALUES))(*VALUES)
    LIBC.qsort(arr, len(arr), ctypes.sizeof(ctypes.c_int), COMPARE)
'''
    ),
}
PURE_PROGRAMS = list(PROGRAMS)
PROGRAMS.update(NATIVE_PROGRAMS)

DRIVER_TAIL = r'''
import sys, time
def work(seconds):
    deadline = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < deadline:
        unit()
        n += 1
    return n
if __name__ == "__main__":
    if len(sys.argv) > 2:
        # Profilers attaching from outside: one unit to warm up (imports, caches), then
        # the measured work starts when the harness says both are sampling.
        import os
        unit()
        while not os.path.exists(sys.argv[2]):
            time.sleep(0.01)
    work(float(sys.argv[1]))
'''

WORK = "work"


def install_lib(lib):
    """Pure-Python copies of the packages in `lib` (C speedups removed)."""
    stamp = os.path.join(lib, ".installed")
    if os.path.exists(stamp):
        return
    os.makedirs(lib, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", lib]
                   + PACKAGES, check=True)
    for so in glob.glob(os.path.join(lib, "**", "*.so"), recursive=True):
        os.remove(so)
    open(stamp, "w").close()


# --native: native frames are keyed by function name alone (py-spy names their file by
# DWARF source file where there is one, tach by module).
NATIVE = False


def frame_key(file, func):
    if NATIVE and not file.endswith(".py"):
        # Code with no symbol: py-spy names it by address, tach by module offset; both
        # count as the module's unnamed code.
        if re.fullmatch(r"0x[0-9a-f]+|.*\+0x[0-9a-f]+", func):
            return ("native", os.path.basename(file) + "+?")
        return ("native", func)
    return (os.path.basename(file), func)


def read_folded(path, frame_of, skip=0):
    """Folded stacks `frame;frame;... count`, root first: frame tuple -> count, each
    part after the first `skip` turned into a frame key by `frame_of`."""
    stacks = Counter()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            text, _, count = line.rpartition(" ")
            frames = [frame_of(part) for part in text.split(";")[skip:]]
            stacks[tuple(frames)] += int(count)
    return stacks


def parse_pyspy(path):
    """py-spy raw: `func (file);func (file) count`, root first."""
    def frame_of(part):
        m = re.match(r"^(.*) \((.*)\)$", part)
        return frame_key(m.group(2), m.group(1)) if m else ("", part)
    return read_folded(path, frame_of)


def parse_collapsed(path):
    """CPython's collapsed stacks (also tach's): `tid:N;file:func:line;... count`."""
    def frame_of(part):
        file, sep, rest = part.partition(":")
        func, _, _lineno = rest.rpartition(":")
        return frame_key(file, func) if sep else ("", part)
    return read_folded(path, frame_of, skip=1)  # the first part is `tid:N`


def in_tach(frames):
    """A stack in tach's own code: in-process, a reference that samples the thread while
    tach's signal handler holds it sees the handler (tach's extension, and the futex it
    waits on). That is tach's cost, not the program's work, and tach's own samples cannot
    see it: such samples are left out of the shares."""
    return any(k[0] == "native" and (k[1].startswith("_native.") or k[1] == "on_pause")
               for k in frames)


def shares(stacks, driver):
    """Self and inclusive shares (%) among stacks inside `work`, frames from it up."""
    work = frame_key(driver, WORK)
    self_c, incl_c, total = Counter(), Counter(), 0
    for frames, n in stacks.items():
        if work not in frames or in_tach(frames):
            continue
        inner = frames[frames.index(work):]
        total += n
        self_c[inner[-1]] += n
        for fr in set(inner):
            incl_c[fr] += n
    if total == 0:
        return {}, {}, 0
    pct = lambda c: {k: 100.0 * v / total for k, v in c.items()}  # noqa: E731
    return pct(self_c), pct(incl_c), total


def run_tach(py, env, driver, seconds, rate, out, extra=()):
    cmd = py + ["-m", "tach", "run", "--no-gc", *extra, "-r", str(rate), "-o", out + ".tach",
                driver, str(seconds)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"tach run failed ({p.returncode}): {shlex.join(cmd)}\n{p.stderr}")
    return finish_tach(p.stderr, out)


def finish_tach(stderr, out, tach_bin=None):
    """The recorder's summary and error rate, and its recording's folded stacks."""
    summary = [ln for ln in stderr.splitlines() if ln.startswith("tach:")]
    m = re.search(r"\(([\d.]+)% ticks with errors", stderr)
    err = float(m.group(1)) if m else float("nan")
    # The host's tach reads every version's files: the binary when given, else this
    # interpreter's tach package.
    tach = [tach_bin] if tach_bin else [
        sys.executable, "-c",
        "import sys; from tach._cli import main; sys.argv[0] = 'tach'; sys.exit(main())"]
    subprocess.run(tach + ["export", "--collapsed", "-o", out + ".collapsed", out + ".tach"],
                   check=True, stdout=subprocess.DEVNULL)
    return parse_collapsed(out + ".collapsed"), err, summary


def find_pyspy():
    exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(exe):
        sys.exit("py-spy not found: pip install py-spy")
    return exe


def pyspy_command(rate, out):
    """py-spy in its default (stopping) mode, writing raw folded stacks to OUT.pyspy."""
    return [find_pyspy(), "record", "--idle", "--nolineno", "--full-filenames", "--format",
            "raw", "-r", str(rate), "-o", out + ".pyspy"] + (["--native"] if NATIVE else [])


def cpython_options(rate, out):
    """CPython's sampler options (after `run` or `attach`), writing collapsed OUT.ref."""
    return ["--blocking", "--no-gc", "-r", str(rate), "--collapsed", "-o", out + ".ref"]


def run_pyspy(py, env, driver, seconds, rate, out):
    base = pyspy_command(rate, out)
    if os.path.basename(py[-1]).startswith("python") and len(py) == 1:
        subprocess.run(base + ["--", *py, driver, str(seconds)], env=env, check=True,
                       capture_output=True)
    else:
        # A wrapper (the chroot): start it, find the interpreter's pid, attach.
        proc = subprocess.Popen(py + [driver, str(seconds)], env=env)
        pid = wait_for_child_python(proc.pid, driver)
        subprocess.run(base + ["--pid", str(pid)], check=True, capture_output=True)
        proc.wait()
    return parse_pyspy(out + ".pyspy")


def wait_for_child_python(root, driver):
    deadline = time.time() + 30
    while time.time() < deadline:
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            # The wrapper may exec into the interpreter (scripts/cpython-chroot does):
            # then the root itself is the process to record.
            if any(driver.encode() == a for a in argv) and \
                    os.path.basename(argv[0].decode()).startswith("python"):
                return int(d)
        time.sleep(0.005)
    sys.exit("could not find the program's interpreter process")


def run_cpython(py, env, driver, seconds, rate, out):
    cmd = py + ["-m", "profiling.sampling", "run", *cpython_options(rate, out), driver,
                str(seconds)]
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return parse_collapsed(out + ".ref")


def run_same_process(py, env, driver, seconds, rate, ref_rate, out, reference, extra=(),
                     attach=None):
    """tach and the reference record one process together: the reference attaches by
    pid to `python -m tach run`, so both see the same execution and the program's own
    mix of work, which moves between runs, drops out of the comparison. With `attach`
    (the tach binary), tach attaches by pid too (`tach record --pid`)."""
    go = out + ".go"
    if attach:
        # tach from outside: the program runs alone, and both profilers attach to it
        # before its measured work starts (the driver waits for `go`).
        if os.path.exists(go):
            os.remove(go)
        program = subprocess.Popen(py + [driver, str(seconds), go], env=env)
        pid = wait_for_child_python(program.pid, driver)
        cmd = [attach, "record", "--pid", str(pid), "--no-gc", *extra, "-r", str(rate),
               "-o", out + ".tach"]
        proc = None
    else:
        program = None
        cmd = py + ["-m", "tach", "run", "--no-gc", *extra, "-r", str(rate), "-o",
                    out + ".tach", driver, str(seconds)]
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
        pid = wait_for_child_python(proc.pid, driver)
    if reference == "pyspy":
        ref_cmd = pyspy_command(ref_rate, out) + ["--pid", str(pid)]
        ref_file, parse = out + ".pyspy", parse_pyspy
    else:
        ref_cmd = py + ["-m", "profiling.sampling", "attach",
                        *cpython_options(ref_rate, out), str(pid)]
        ref_file, parse = out + ".ref", parse_collapsed
    ref = subprocess.Popen(ref_cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    if proc is None:
        # The reference first: py-spy gives up at start-up when it cannot stop a thread
        # (PTRACE_ATTACH fails while tach's pause holds one, which on 3.9/3.10, whose
        # frames are read one by one, is often), but once sampling it counts such a
        # sample as an error and goes on. Then tach, then the work: both see all of it.
        time.sleep(1.0)
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        open(go, "w").close()
    _, ref_stderr = ref.communicate()
    _, stderr = proc.communicate()
    if program is not None:
        program.wait()
    if proc.returncode != 0:
        sys.exit(f"tach run failed ({proc.returncode}): {shlex.join(cmd)}\n{stderr}")
    if ref.returncode != 0 or not os.path.exists(ref_file):
        sys.exit(f"reference failed ({ref.returncode}): {shlex.join(ref_cmd)}\n{ref_stderr}")
    ours, err, summary = finish_tach(stderr, out, attach)
    return ours, err, summary, parse(ref_file)


def compare(name, ours, ref, top):
    (s_ours, i_ours, n_ours), (s_ref, i_ref, n_ref) = ours, ref
    keys = sorted(i_ref, key=lambda k: (-i_ref[k], k))[:top]
    rows, worst = [], (0.0, None)
    for k in keys:
        vals = (s_ours.get(k, 0.0), s_ref.get(k, 0.0), i_ours.get(k, 0.0), i_ref.get(k, 0.0))
        for gap, what in ((abs(vals[0] - vals[1]), "self"), (abs(vals[2] - vals[3]), "incl")):
            if gap > worst[0]:
                worst = (gap, f"{what} {k[1]} ({k[0]})")
        rows.append((k, vals))
    return rows, worst, n_ours, n_ref


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", default=None,
                    help="default: the pure-Python programs (the native ones with --native)")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter under test, a command line (default: this one)")
    ap.add_argument("--reference-rate", type=int, default=None,
                    help="the reference's rate (default: --rate)")
    ap.add_argument("--reference-seconds", type=float, default=None,
                    help="how long the program runs under the reference (default: --seconds)")
    ap.add_argument("--reference", choices=["pyspy", "cpython"], default="pyspy")
    ap.add_argument("--tach-path", default=None,
                    help="a directory holding the tach package for --python")
    ap.add_argument("--lib", default=os.path.join(ROOT, ".venv-accuracy", "lib"))
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--no-blocking", action="store_true",
                    help="record with python -m tach run --no-blocking")
    ap.add_argument("--keep", default=None, help="keep recordings in this directory")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse the reference's recordings already in --keep (tach runs again)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--same-process", action="store_true",
                    help="the reference attaches to tach's own run (one execution for both)")
    ap.add_argument("--attach", default=None, metavar="TACH",
                    help="with --same-process: record with this tach binary from outside "
                         "(tach record --pid), not python -m tach run")
    ap.add_argument("--native", action="store_true",
                    help="native stacks: tach --native and py-spy --native (needs "
                         "--same-process; the default programs become the native ones)")
    args = ap.parse_args()
    global NATIVE
    NATIVE = args.native
    if args.native and not args.same_process:
        ap.error("--native needs --same-process (the reference attaches to tach's run)")
    if args.programs is None:
        args.programs = ",".join(NATIVE_PROGRAMS if args.native else PURE_PROGRAMS)
    if args.attach and not args.same_process:
        ap.error("--attach needs --same-process (tach attaches to a program run alone)")
    if args.attach:
        args.attach = os.path.abspath(args.attach)

    install_lib(args.lib)
    py = shlex.split(args.python)
    env = dict(os.environ)
    path = [os.path.abspath(args.lib)]
    if args.tach_path:
        path.insert(0, os.path.abspath(args.tach_path))
    env["PYTHONPATH"] = os.pathsep.join(path + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if len(py) > 1:
        # A wrapper (the chroot) may start the interpreter with a clean environment: the
        # path goes on its command line.
        py = py[:-1] + ["env", "PYTHONPATH=" + env["PYTHONPATH"], py[-1]]
    # Under the worktree: the chroot only sees /work.
    work_dir = args.keep or tempfile.mkdtemp(prefix="accuracy-", dir=ROOT)
    os.makedirs(work_dir, exist_ok=True)
    reference = {"pyspy": run_pyspy, "cpython": run_cpython}[args.reference]
    version = subprocess.run(py + ["-c", "import sys; print(sys.version.split()[0])"],
                             env=env, capture_output=True, text=True, check=True).stdout.strip()
    print(f"# CPython {version}, {args.rate} Hz, {args.seconds:g} s per program, "
          f"reference {args.reference}, top {args.top} functions by reference inclusive share")
    results = {}
    for name in args.programs.split(","):
        driver = os.path.abspath(os.path.join(work_dir, f"accuracy_{name}.py"))
        with open(driver, "w") as f:
            f.write(PROGRAMS[name] + DRIVER_TAIL)
        out = os.path.join(work_dir, name)
        extra = ["--no-blocking"] if args.no_blocking else []
        if args.native:
            extra = ["--native"]
        ref_file = out + {"pyspy": ".pyspy", "cpython": ".ref"}[args.reference]
        if args.same_process:
            ours_stacks, err, summary, ref_stacks = run_same_process(
                py, env, driver, args.seconds, args.rate, args.reference_rate or args.rate,
                out, args.reference, extra, args.attach)
        else:
            ours_stacks, err, summary = run_tach(py, env, driver, args.seconds, args.rate,
                                                 out, extra)
            if args.reuse and os.path.exists(ref_file):
                parse = parse_pyspy if args.reference == "pyspy" else parse_collapsed
                ref_stacks = parse(ref_file)
            else:
                ref_stacks = reference(py, env, driver, args.reference_seconds or args.seconds,
                                       args.reference_rate or args.rate, out)
        rows, worst, n_ours, n_ref = compare(
            name, shares(ours_stacks, driver), shares(ref_stacks, driver), args.top)
        m = re.search(r"([\d.]+)% missed", " ".join(summary))
        missed = float(m.group(1)) if m else float("nan")
        print(f"\n## {name}: tach {n_ours} samples in work, {err:.2f}% ticks with errors, "
              f"{missed:.2f}% missed; {args.reference} {n_ref} samples in work")
        print(f"{'function':<58} {'self tach':>9} {'ref':>6} {'incl tach':>9} {'ref':>6}")
        for (file, func), v in rows:
            label = f"{func} ({file})"[:58]
            print(f"{label:<58} {v[0]:9.1f} {v[1]:6.1f} {v[2]:9.1f} {v[3]:6.1f}")
        print(f"largest gap: {worst[0]:.1f} points, {worst[1]}")
        results[name] = {"error_rate": err, "missed": missed, "largest_gap": worst[0],
                         "where": worst[1],
                         "samples": n_ours, "reference_samples": n_ref,
                         "rows": [[f, fn, *v] for (f, fn), v in rows]}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"version": version, "results": results}, f, indent=1)
    if not args.keep:
        shutil.rmtree(work_dir, ignore_errors=True)
    print("\nsummary: " + ", ".join(
        f"{n} gap {r['largest_gap']:.1f} err {r['error_rate']:.2f}% missed {r['missed']:.2f}%"
        for n, r in results.items()))


if __name__ == "__main__":
    main()
