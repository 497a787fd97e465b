"""`tach record --native` and `tach dump --native`: native stacks (C, C++ and Rust
frames, with the Python frames spliced in where the interpreter runs them) of another
process, checked against py-spy 0.4 `--native` attached to the same execution.

The programs spend their time in native code nobody here wrote: numpy's LAPACK/OpenBLAS
(`svd`) and sort, zlib's `deflate`, the json accelerator's encoder, the `_sre` search,
and libc's `qsort` calling back into Python through ctypes, so native code sits between
Python frames. They run on pyenv's CPython 3.12 (no frame pointers: CFI unwinding) from
a venv with numpy and py-spy from PyPI (made here when missing), and on Debian's
CPython 3.15 in the chroot (frame pointers) for the format checks.

Run with TACH_BIN naming the tach binary (default target/debug/tach; the accuracy test
is meant for a release build: a debug build's sampler falls behind).
"""

import glob
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import CHROOT, REPO, TACH, chroot_ok, read_collapsed

HARNESS = os.path.join(REPO, "python", "bench", "accuracy.py")
VENV = os.path.join(REPO, ".venv-native-3.12")
TIMEOUT = 300

PROGRAM = """\
import os, sys, time
os.environ["OPENBLAS_NUM_THREADS"] = "1"
import zlib, json, ctypes, ctypes.util
LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
def compare(a, b):
    return a[0] - b[0]
COMPARE = CMP(compare)
DATA = b"".join(b"%d spam eggs " % i for i in range(40000))
DOC = [{"id": i, "tags": ["a", str(i)], "ok": i % 2 == 0} for i in range(4000)]
def squeeze():
    zlib.compress(DATA, 9)
def encode():
    json.dumps(DOC)
def qsort():
    arr = (ctypes.c_int * 3000)(*range(3000, 0, -1))
    LIBC.qsort(arr, 3000, 4, COMPARE)
def main(seconds):
    end = time.time() + seconds
    while time.time() < end:
        squeeze(); encode(); qsort()
print("ready", flush=True)
main(float(sys.argv[1]))
"""


def pyenv312():
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12.*/bin/python3.12")))
    if not found:
        pytest.skip("SKIPPED: native: no pyenv CPython 3.12 here")
    return found[-1]


def venv():
    """A venv of pyenv's 3.12 with numpy and py-spy 0.4 from PyPI."""
    py = os.path.join(VENV, "bin", "python")
    spy = os.path.join(VENV, "bin", "py-spy")
    if not (os.path.exists(py) and os.path.exists(spy)):
        subprocess.run([pyenv312(), "-m", "venv", VENV], check=False, capture_output=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "numpy", "py-spy==0.4.*"],
                       check=False, capture_output=True)
    if not (os.path.exists(py) and os.path.exists(spy)):
        pytest.skip("SKIPPED: native: numpy and py-spy could not be installed from PyPI")
    ok = subprocess.run([py, "-c", "import numpy"], capture_output=True).returncode == 0
    if not ok:
        pytest.skip("SKIPPED: native: numpy does not import in the venv")
    return py


def tach(*args):
    if not os.path.exists(TACH):
        pytest.fail(f"no tach binary at {TACH} (cargo build, or set TACH_BIN)")
    return subprocess.run([TACH, *args], capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)


def stack_lines(path):
    """{collapsed stack (root first, `file:func:line` parts): count}."""
    out = path + ".collapsed"
    p = tach("export", "--collapsed", "-o", out, path)
    assert p.returncode == 0, p.stderr
    return read_collapsed(out)


def funcs(stack):
    """Function names of a collapsed stack, root first."""
    return [part.rsplit(":", 2)[-2] if part.count(":") >= 2 else part
            for part in stack.split(";")[1:]]


def in_order(names, *wanted):
    """`wanted` appear in `names` in this order (root to leaf), not necessarily adjacent."""
    at = 0
    for w in wanted:
        try:
            at = names.index(w, at) + 1
        except ValueError:
            return False
    return True


def record(cmd, work, seconds, extra=()):
    script = os.path.join(work, "native_target.py")
    with open(script, "w") as f:
        f.write(PROGRAM)
    out = os.path.join(work, "native.tach")
    p = tach("record", "--native", "-r", "200", *extra, "-o", out, "--", *cmd, script,
             str(seconds))
    assert p.returncode == 0, p.stderr
    assert "native:" in p.stderr, p.stderr
    return out, p.stderr


def check_mixed_stacks(out):
    v = tach("verify", out)
    assert v.returncode == 0, v.stdout + v.stderr
    info = tach("info", out)
    assert info.returncode == 0 and "native" in info.stdout, info.stdout
    lines = stack_lines(out)
    named = [funcs(s) for s in lines]
    # Python caller -> C function of the module -> zlib's own code.
    assert any(in_order(n, "main", "squeeze", "zlib_compress", "deflate") for n in named), \
        list(lines)[:20]
    assert any(in_order(n, "main", "encode", "dumps", "encoder_listencode_obj") for n in named), \
        list(lines)[:20]
    # The ctypes callback: Python, then libc's qsort, then Python again.
    assert any(in_order(n, "qsort", "qsort_r", "compare") for n in named), list(lines)[:20]
    # No frame of the interpreter's own call machinery shows.
    assert not any(f.startswith(("_PyEval_", "PyObject_Vectorcall", "_PyObject_MakeTpCall"))
                   for n in named for f in n), list(lines)[:20]
    return lines


def test_record_native_on_312_mixes_native_and_python_frames(tmp_path):
    py = pyenv312()
    out, stderr = record([py], str(tmp_path), 5)
    check_mixed_stacks(out)
    # Native frames are named by DWARF where the module has it (pyenv's zlib module):
    # source file and line; else the module's path and no line.
    lines = stack_lines(out)
    assert any(re.search(r"zlibmodule\.c:zlib_compress_impl:\d+", s) for s in lines), list(lines)[:10]
    assert any(re.search(r"libz\.so[.\d]*:deflate:", s) for s in lines), list(lines)[:10]


def test_record_native_on_315_replays_in_cpython(work):
    if not chroot_ok():
        pytest.skip("SKIPPED: native on 3.15: the CPython chroot is not available here")
    # `work`: a scratch directory in the checkout (the chroot sees only the checkout).
    out, _ = record([CHROOT, "run", "--", "python3.15"], str(work), 5)
    v = tach("verify", out)
    assert v.returncode == 0, v.stdout + v.stderr
    # Debian's 3.15 runs bytecode in its tail-calling handlers, which the walk passes
    # without finding the evaluation loop's frames (docs/recorder.md): the Python frames
    # then go after the native ones, as py-spy puts them. Only the names are checked.
    names = {f for s in stack_lines(out) for f in funcs(s)}
    assert {"deflate", "qsort_r", "squeeze", "compare"} <= names, sorted(names)[:50]
    replayed = str(out) + ".replay"
    p = subprocess.run([CHROOT, "run", "--", "python3.15", "-m", "profiling.sampling", "replay",
                        "--collapsed", "-o", replayed, str(out)], cwd=REPO, capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    with open(replayed) as f:
        text = f.read()
    # (Debian builds the json accelerator into the interpreter, whose frames are hidden.)
    assert "deflate" in text and "qsort_r" in text, text[:2000]


def test_dump_native(tmp_path):
    py = pyenv312()
    script = os.path.join(tmp_path, "native_target.py")
    with open(script, "w") as f:
        f.write(PROGRAM)
    proc = subprocess.Popen([py, script, "20"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        # A thread that does not stop within 20 ms (a busy machine) has no native stack
        # at that tick: dump again.
        for _ in range(10):
            p = tach("dump", "--native", "--json", str(proc.pid))
            assert p.returncode == 0, p.stderr
            threads = json.loads(p.stdout)
            frames = [f["function"] for t in threads for f in t["frames"]]
            if frames:
                break
        assert "main" in frames and "<module>" in frames, frames
        # The main thread's stack ends in libc's start (py-spy keeps that frame too).
        assert any(f["file"].endswith(("libc.so.6",)) for t in threads for f in t["frames"]), \
            frames
    finally:
        proc.kill()
        proc.wait()


def test_native_is_refused_in_process(tmp_path):
    p = tach("record", "--native", "--in-process", "--", sys.executable, "x.py")
    assert p.returncode != 0 and "outside only" in p.stderr, p.stderr


# Programs whose largest gap against py-spy is known to exceed the bound, and why.
OPEN_GAPS = {
    "svd": "framehop ends some walks inside numpy's AVX-512 sort kernels (CFI it does not "
           "evaluate), moving their time to the caller",
    "qsort": "the self time of ctypes' _CallPythonObject between libc's qsort and the "
             "Python comparator differs from py-spy's; not yet understood",
}


def test_native_accuracy_against_pyspy_same_process(tmp_path):
    """py-spy 0.4 --native and tach record --native on one execution of each native
    program: the 15 largest functions' shares, and the names of native functions."""
    py = venv()
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > 2 * cores:
        # Measured at a load of 16 on 2 cores (2026-11-26, docs/recorder.md): both
        # profilers stop the same thread with ptrace and are descheduled while they hold
        # it; py-spy kept 5-15% of its samples, tach half its ticks, and the shares moved
        # by up to 21 points on a few hundred samples.
        pytest.skip(f"SKIPPED: native accuracy: load {load:.1f} on {cores} cores is too busy "
                    "for two ptrace samplers to share one process")
    out = tmp_path / "native.json"
    run = subprocess.run(
        [py, HARNESS, "--native", "--same-process", "--attach", TACH, "--python", py,
         "--rate", "200", "--seconds", "10", "--json", str(out)],
        capture_output=True, text=True, timeout=1200, cwd=REPO)
    print(run.stdout, file=sys.stderr)
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads(out.read_text())["results"]
    for name, r in results.items():
        assert r["reference_samples"] > 300 and r["samples"] > 300, (name, r)
        # Every native function py-spy names among the largest, tach names the same.
        for file, func, s_ours, s_ref, i_ours, i_ref in r["rows"]:
            if file == "native" and i_ref >= 5.0:
                assert i_ours > 0.0, (name, func, i_ref)
        # The goal is 2 points; 3 is what test_accuracy holds on a quiet machine
        # for Python stacks. Two programs are known not to meet it yet (measured on a
        # quiet CI run, 2026-11-26: svd 4.1 points, qsort 7.3; docs/recorder.md): their
        # gaps are printed, not held, until the causes in OPEN_GAPS are fixed.
        if name in OPEN_GAPS:
            print(f"OPEN: native accuracy of {name}: largest gap {r['largest_gap']:.1f} "
                  f"points ({r['where']}): {OPEN_GAPS[name]}", file=sys.stderr)
            continue
        assert r["largest_gap"] <= float(os.environ.get("TACH_NATIVE_GAP", "3")), \
            (name, r["largest_gap"], r["where"])
