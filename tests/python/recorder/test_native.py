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

import functools
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import CHROOT, REPO, TACH, chroot_ok, collapsed_counts, in_order, pyenv_python, run_tach

HARNESS = os.path.join(REPO, "python", "bench", "accuracy.py")
VENV = os.path.join(REPO, ".venv-native-3.12")
TIMEOUT = 300

# zlib's deflate, json's encoder and libc's qsort calling back into Python through
# ctypes: the program that made tests/data/native/mixed-3.12.tach (one text for both).
with open(os.path.join(REPO, "tests", "data", "native", "mixed.py")) as _f:
    PROGRAM = _f.read()


def pyenv_or_skip(version="3.12"):
    python = pyenv_python(int(version.split(".")[1]))
    if python is None:
        pytest.skip(f"SKIPPED: native: no pyenv CPython {version} here")
    return python


def pyenv312():
    return pyenv_or_skip("3.12")


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


def has_orjson(py):
    """Whether the venv has orjson (installed from PyPI when missing): the Rust extension
    among the native accuracy programs."""
    def imports():
        return subprocess.run([py, "-c", "import orjson"], capture_output=True).returncode == 0
    if not imports():
        subprocess.run([py, "-m", "pip", "install", "-q", "orjson"], check=False,
                       capture_output=True)
    return imports()


tach = functools.partial(run_tach, timeout=TIMEOUT)


def stack_lines(path):
    """{collapsed stack (root first, `file:func:line` parts): count}."""
    out = path + ".collapsed"
    p = tach("export", "--collapsed", "-o", out, path)
    assert p.returncode == 0, p.stderr
    return collapsed_counts(out)


def funcs(stack):
    """Function names of a collapsed stack, root first."""
    return [part.rsplit(":", 2)[-2] if part.count(":") >= 2 else part
            for part in stack.split(";")[1:]]


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


@pytest.mark.parametrize("version", ["3.9", "3.10", "3.11", "3.12", "3.13"])
def test_record_native_on_pyenv_mixes_native_and_python_frames(tmp_path, version):
    """From outside on pyenv's builds (no frame pointers: CFI), whose eval loop is found
    by name before 3.12 (no entry frame on the C stack) and by entry frame from 3.12."""
    py = pyenv_or_skip(version)
    out, stderr = record([py], str(tmp_path), 5 if version == "3.12" else 2)
    check_mixed_stacks(out)
    m = re.search(r"\(([\d.]+)% ticks with errors", stderr)
    assert m and float(m.group(1)) < 5, stderr
    # Native frames are named by DWARF where the module has it (pyenv's zlib module):
    # source file and line; else the module's path and no line.
    lines = stack_lines(out)
    assert any(re.search(r"zlibmodule\.c:zlib_compress_impl:\d+", s) for s in lines), list(lines)[:10]
    assert any(re.search(r"libz\.so[.\d]*:deflate:", s) for s in lines), list(lines)[:10]


@pytest.mark.parametrize("version", ["3.13", "3.14", "3.15"])
def test_record_native_on_debian_mixes_native_and_python_frames(work, version):
    """From outside on Debian's stripped 3.13-3.15: the Python frames go where the eval
    loop runs them; on 3.15, CPython's own replay reads the file."""
    if not chroot_ok():
        pytest.skip(f"SKIPPED: native on {version}: the CPython chroot is not available here")
    # `work`: a scratch directory in the checkout (the chroot sees only the checkout).
    out, stderr = record([CHROOT, "run", "--", f"python{version}"], str(work), 3)
    v = tach("verify", out)
    assert v.returncode == 0, v.stdout + v.stderr
    # Debian's interpreter is stripped, and GCC runs its eval loop in the split-off
    # part of `_PyEval_EvalFrameDefault`: the loop's frames are found by the entry
    # frame they hold (docs/recorder.md), so the Python frames go where they run.
    named = [funcs(s) for s in stack_lines(out)]
    assert any(in_order(n, "main", "squeeze", "deflate") for n in named), named[:20]
    assert any(in_order(n, "main", "qsort", "qsort_r", "compare") for n in named), named[:20]
    # No Python frame goes after a native one that is not called from it (the order
    # py-spy falls back to when it finds no eval loop).
    assert not any(in_order(n, "deflate", "squeeze") for n in named), named[:20]
    m = re.search(r"\(([\d.]+)% ticks with errors", stderr)
    assert m and float(m.group(1)) < 5, stderr
    if version != "3.15":
        return
    replayed = str(out) + ".replay"
    p = subprocess.run([CHROOT, "run", "--", "python3.15", "-m", "profiling.sampling", "replay",
                        "--collapsed", "-o", replayed, str(out)], cwd=REPO, capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    with open(replayed) as f:
        text = f.read()
    # (Debian builds the json accelerator into the interpreter, whose frames are hidden.)
    assert "deflate" in text and "qsort_r" in text, text[:2000]


# A program for the comparison with CPython's own `--native`: zlib's deflate (a leaf
# native call), libc's qsort calling back into Python through ctypes (native code between
# Python frames) and pure Python. It waits for the file argv[2] before its work, so that
# both samplers are attached to all of it.
PROGRAM_315 = """\
import ctypes, ctypes.util, os, sys, time, zlib
LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
def compare(a, b):
    return a[0] - b[0]
COMPARE = CMP(compare)
DATA = b"".join(b"%d spam eggs " % i for i in range(40000))
def compress():
    zlib.compress(DATA, 9)
def qsort():
    arr = (ctypes.c_int * 2000)(*range(2000, 0, -1))
    LIBC.qsort(arr, 2000, 4, COMPARE)
def spin():
    return sum(i * i for i in range(30000))
def main(seconds):
    end = time.time() + seconds
    while time.time() < end:
        compress(); qsort(); spin()
print("ready", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
main(float(sys.argv[1]))
"""


def python_skeletons(path, native_of):
    """{(Python frames, `file:func`, from the script's `<module>`): (count, {places of a
    native run})} of the stacks under `main`, and their total. A place is the index of the Python frame a
    run of native frames comes before: where CPython's `--native` puts its `<native>`
    placeholder (it marks each entry of the eval loop from C, nothing after the innermost
    Python frame)."""
    out, total = {}, 0
    with open(path) as f:
        for line in f:
            stack, n = line.rstrip("\n").rsplit(" ", 1)
            frames, places = [], set()
            for part in stack.split(";")[1:]:
                if native_of(part):
                    places.add(len(frames))
                else:
                    frames.append(part.rsplit(":", 1)[0])
            places.discard(len(frames))
            # From the script's `<module>` on: in-process, what runs the script (tach's
            # runner, hidden in tach's stacks) is below it in CPython's.
            modules = [i for i, f in enumerate(frames) if f.endswith(":<module>")]
            first = modules[-1] if modules else 0
            if not any(f.endswith(":main") for f in frames[first:]):
                continue
            places = {p - first for p in places if p >= first}
            key = tuple(frames[first:])
            count, seen = out.get(key, (0, set()))
            out[key] = (count + int(n), seen | places)
            total += int(n)
    return out, total


@pytest.mark.parametrize("where", ["outside", "in-process"])
def test_native_on_315_python_part_equals_cpython_native(work, where):
    """tach --native (`tach record --pid` from outside, or `python -m tach run` in the
    process) and CPython 3.15's own `attach --native --blocking` on one execution: with
    tach's native frames folded into CPython's `<native>` placeholder, the stacks' shares
    agree; and the zlib loop reads main -> compress -> deflate."""
    if not chroot_ok():
        pytest.skip("SKIPPED: native on 3.15: the CPython chroot is not available here")
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > 2 * cores:
        pytest.skip(f"SKIPPED: native vs CPython --native: load {load:.1f} on {cores} cores "
                    "is too busy for two samplers to share one process")
    script = os.path.join(work, "native315.py")
    with open(script, "w") as f:
        f.write(PROGRAM_315)

    def record_pair(attempt):
        """One execution recorded by both: the stacks' shares and the largest gap."""
        go = os.path.join(work, f"go-{attempt}")
        out = os.path.join(work, f"native-{attempt}.tach")
        ref = os.path.join(work, f"cpython-{attempt}.collapsed")
        ours_cmd = [TACH, "record", "--native", "--no-gc", "-r", "200", "--pid", "PID", "-o", out]
        program = [CHROOT, "run", "--", "python3.15", script, "8", go]
        if where == "in-process":
            # The one abi3 extension tests/python/run.sh built into python/tach/.
            if not glob.glob(os.path.join(REPO, "python", "tach", "_native*.so")):
                pytest.skip("SKIPPED: native in-process on 3.15: no built extension in python/tach")
            program = [CHROOT, "run", "--", "env", f"PYTHONPATH={REPO}/python", "python3.15", "-m",
                       "tach", "run", "-q", "--native", "--no-gc", "-r", "200", "-o", out, script,
                       "8", go]
            ours_cmd = None
        proc = subprocess.Popen(program, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            pid = None
            for d in os.listdir("/proc"):
                try:
                    with open(f"/proc/{d}/cmdline", "rb") as f:
                        argv = f.read().split(b"\0")
                except OSError:
                    continue
                if script.encode() in argv and os.path.basename(argv[0]).startswith(b"python"):
                    pid = int(d)
            assert pid, "the program's interpreter process was not found"
            ref_proc = subprocess.Popen(
                [CHROOT, "run", "--", "python3.15", "-m", "profiling.sampling", "attach",
                 "--native", "--blocking", "--no-gc", "-r", "200", "--collapsed", "-o", ref,
                 str(pid)],
                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            ours = proc
            if ours_cmd is not None:
                ours_cmd[ours_cmd.index("PID")] = str(pid)
                ours = subprocess.Popen(ours_cmd, cwd=REPO, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
            time.sleep(1.0)
            open(go, "w").close()
            _, ours_err = ours.communicate(timeout=TIMEOUT)
            _, ref_err = ref_proc.communicate(timeout=TIMEOUT)
            assert ours.returncode == 0, ours_err
            assert ref_proc.returncode == 0 and os.path.exists(ref), ref_err
        finally:
            proc.kill()
            proc.wait()
        collapsed = out + ".collapsed"
        p = tach("export", "--collapsed", "-o", collapsed, out)
        assert p.returncode == 0, p.stderr

        def tach_native(part):
            file = part.split(":", 1)[0]
            return not (file.endswith(".py") or file.startswith("<"))

        ours, ours_n = python_skeletons(collapsed, tach_native)
        ref, ref_n = python_skeletons(ref, lambda part: part == "<native>")
        print(f"tach {ours_n} samples in main, CPython --native {ref_n}; {ours_err.strip()}",
              file=sys.stderr)
        assert ours_n > 300 and ref_n > 300, (ours_n, ref_n)

        def share(stacks, total, k):
            return 100.0 * stacks.get(k, (0, set()))[0] / total

        keys = sorted(set(ref) | set(ours), key=lambda k: -share(ref, ref_n, k))
        for k in keys[:8]:
            print(f"{share(ref, ref_n, k):6.1f} {share(ours, ours_n, k):6.1f}  {';'.join(k)}  "
                  f"<native> before {sorted(ref.get(k, (0, set()))[1])}, tach's native frames "
                  f"before {sorted(ours.get(k, (0, set()))[1])}", file=sys.stderr)
        # The Python part: each stack's share against CPython's, held to 3 points (the goal
        # is 2; a quiet machine gives 1.3-1.7). The reference is
        # CPython's sampler with --blocking: without it CPython reads the running thread and
        # misses the ctypes callback (Python `compare` entered from libc's qsort thousands of
        # times a call): alone on separate executions it gave `qsort;compare` 1.2-1.3% while
        # its --blocking mode gave 7.1% and tach 7.3-8.6% (a 6-7 point gap without it, coming
        # out of `compress`).
        gap, worst = max((abs(share(ours, ours_n, k) - share(ref, ref_n, k)), k) for k in keys)
        print(f"largest gap {gap:.1f} points ({';'.join(worst)})", file=sys.stderr)
        return out, ours, ours_n, ref, ref_n, gap, worst

    bound = float(os.environ.get("TACH_NATIVE_GAP", "3"))
    out, ours, ours_n, ref, ref_n, gap, worst = record_pair(1)
    if gap > bound:
        # As the accuracy test does: two samplers taking turns on one process are each a
        # sample of ~1,600 ticks, whose shares near 60% differ by about 1.7 points (one
        # standard error) from sampling alone (a run beside a fuzzer gave 4.1
        # points, then 0.7-1.7 in four runs). A gap over the bound is measured again on a
        # new execution; a systematic one fails twice.
        print(f"RETRIED: native vs CPython --native: {gap:.1f} points over {bound} "
              f"({';'.join(worst)})", file=sys.stderr)
        out, ours, ours_n, ref, ref_n, gap, worst = record_pair(2)
    assert gap <= bound, (gap, worst)
    # tach's native frames between Python frames sit where CPython's placeholder is (it
    # has more: a C function of the interpreter calling Python, such as `sum` over a
    # generator, whose frames tach hides as py-spy does).
    for k, (n, places) in ours.items():
        if k in ref:
            assert places <= ref[k][1], (k, places, ref[k][1])
    # The ctypes callback: native frames between qsort and compare.
    callback = [k for k in ours if k[-1].endswith(":compare")]
    assert callback and all(len(k) - 1 in ours[k][1] for k in callback), \
        [(k, ours[k][1]) for k in callback]
    # The known program reads, root to leaf: main -> compress -> zlib's C code -> deflate.
    named = [funcs(s) for s in stack_lines(out)]
    assert any(in_order(n, "main", "compress", "deflate") for n in named), named[:10]
    assert not any(in_order(n, "deflate", "compress") for n in named), named[:10]


FAULTS_C = os.path.join(REPO, "tests", "data", "native", "faults.c")
FAULTS_PY = os.path.join(REPO, "tests", "data", "native", "faults.py")


def compile_faults(work):
    """tests/data/native/faults.c built as a shared library (gcc, installed from Debian's
    packages when missing)."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "gcc"], capture_output=True,
                       check=False)
        cc = shutil.which("gcc")
    if cc is None:
        pytest.skip("SKIPPED: native faults: no C compiler, and apt-get could not install gcc")
    lib = os.path.join(work, "faults.so")
    # No sibling calls: the recursion must keep its 10,000 frames.
    subprocess.run([cc, "-O1", "-g", "-fno-optimize-sibling-calls", "-fPIC", "-shared",
                    "-o", lib, FAULTS_C], check=True, capture_output=True)
    return lib


@pytest.mark.parametrize("where", ["outside", "in-process"])
def test_native_faults_end_walks_and_are_counted(tmp_path, where):
    """The issue's faults, in one real program on pyenv's 3.12 (tests/data/native/): a
    10,000-frame native recursion, code in anonymous executable memory with no unwind
    entry (as JIT code is), a library loaded and unloaded (dlclose) again and again, a C
    signal handler running. tach and the program both finish, the file verifies, each
    fault's samples are there, walks that cannot go on end there and are counted among
    the ticks with errors, and no made-up frame follows code without unwind rules."""
    py = pyenv312()
    work = str(tmp_path)
    lib = compile_faults(work)
    out = os.path.join(work, "faults.tach")
    program = [FAULTS_PY, lib, "4", work]
    if where == "outside":
        cmd, env = [TACH, "record", "--native", "-r", "200", "-o", out, "--", py, *program], None
    else:
        if not glob.glob(os.path.join(REPO, "python", "tach", "_native*.so")):
            pytest.skip("SKIPPED: native faults in-process: no built extension in python/tach")
        cmd = [py, "-m", "tach", "run", "--native", "-r", "200", "-o", out, *program]
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO, env=env)
    print(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "", file=sys.stderr)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"^done \d+$", p.stdout, re.MULTILINE), p.stdout + p.stderr
    v = tach("verify", out)
    assert v.returncode == 0, v.stdout + v.stderr
    m = re.search(r"\(([\d.]+)% ticks with errors.*native: (\d+) walks, (\d+) cut short",
                  p.stderr)
    assert m, p.stderr
    errors, walks, cut = float(m[1]), int(m[2]), int(m[3])
    stacks = [(funcs(s), n) for s, n in stack_lines(out).items()]
    total = sum(n for _, n in stacks)
    assert total > 300 and walks > 300, p.stderr

    def share(pred):
        return sum(n for f, n in stacks if pred(f)) / total

    # The recursion: its innermost frames are kept (the file keeps 256), the rest cut.
    deep = share(lambda f: f.count("recurse") >= 200)
    # JIT code: named by its address, right under the Python caller (the callers in
    # between cannot be found without unwind rules); nothing after it. A sample taken while
    # the interpreter prepares the call (jit_code running, ctypes' PyCFuncPtr_call and
    # libffi under it) is a true stack of named frames, whole up to libc's start: CI saw
    # one in 810 end at jit_code and one go on into PyCFuncPtr_call. Either way, no
    # anonymous address is followed by anything.
    jit = [f for f, _ in stacks if "jit_code" in f]
    address = re.compile(r"^0x[0-9a-f]+$")

    def in_jit(f):
        return len(f) == f.index("jit_code") + 2 and address.match(f[-1])

    def before_jit(f):
        return not any(address.match(x) for x in f[f.index("jit_code") + 1:])

    assert jit and all(in_jit(f) or before_jit(f) for f in jit), jit[:5]
    assert any(in_jit(f) for f in jit), jit[:5]
    in_jit_share = share(lambda f: "jit_code" in f and in_jit(f))
    # The unloaded library's function, and the C signal handler's.
    unloaded = share(lambda f: in_order(f, "unloaded_library", "spin"))
    handler = share(lambda f: in_order(f, "on_signal", "spin"))
    print(f"{where}: {total} samples, {errors:.2f}% ticks with errors, {cut} of {walks} walks "
          f"cut short; recursion {deep:.0%}, JIT {in_jit_share:.0%}, "
          f"unloaded library {unloaded:.0%}, signal handler {handler:.0%}", file=sys.stderr)
    assert deep > 0.05 and unloaded > 0 and handler > 0, (deep, unloaded, handler)
    # Every recursion sample and every JIT sample is a walk that could not go on: each
    # is counted among the ticks with errors.
    assert cut >= (deep + in_jit_share) * total * 0.95, (cut, deep)
    assert errors >= 100.0 * cut / walks * 0.9, (errors, cut, walks)


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


def test_top_native_shows_native_functions_live(tmp_path):
    """`tach top --native --pid PID` in a terminal (tmux, as test_top_live drives the
    view): the table's rows name native functions (zlib's deflate, libc's qsort_r)
    beside the Python ones, and q ends it."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from test_top_live import Tmux, have_tmux, rows
    if not have_tmux():
        pytest.skip("SKIPPED: tach top --native: no tmux here, and apt-get could not install it")
    py = pyenv312()
    script = os.path.join(tmp_path, "native_target.py")
    with open(script, "w") as f:
        f.write(PROGRAM)
    proc = subprocess.Popen([py, script, "60"], stdout=subprocess.PIPE, text=True)
    tmux = Tmux()
    try:
        assert proc.stdout.readline().strip() == "ready"
        tmux.type(f"{TACH} top --native --sort total --pid {proc.pid}; echo EXIT=$?")
        screen = tmux.wait("deflate and qsort_r in the table", lambda s: {
            "deflate", "qsort_r"} <= {r[0] for r in rows(s)}, timeout=120)
        names = {r[0] for r in rows(screen)}
        assert {"main"} & names or "squeeze" in names or "compare" in names, screen
        tmux.keys("q")
        s = tmux.wait("EXIT", lambda s: re.search(r"^EXIT=\d+", s, re.MULTILINE))
        assert re.search(r"^EXIT=0$", s, re.MULTILINE), s
    finally:
        tmux.close()
        proc.kill()
        proc.wait()


def gdb_binary():
    """gdb, installed from Debian's packages when missing (None: it cannot be)."""
    gdb = shutil.which("gdb")
    if gdb is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "gdb"], capture_output=True, check=False)
        gdb = shutil.which("gdb")
    return gdb


# gdb's names carry GCC's clone suffixes, which tach leaves out (docs/recorder.md).
GCC_SUFFIX = re.compile(r"(\.(isra|part|constprop|cold|lto_priv)(\.\d+)?)+$")


def gdb_stacks(pid):
    """{thread id: function names, innermost first} from gdb's `thread apply all bt`
    (frames without a name, `??`, left out)."""
    out = subprocess.run([gdb_binary(), "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                         capture_output=True, text=True, timeout=120).stdout
    stacks, tid = {}, None
    for line in out.splitlines():
        m = re.match(r"Thread \d+ \(Thread 0x[0-9a-f]+ \(LWP (\d+)\)", line)
        if m:
            tid = int(m[1])
            stacks[tid] = []
            continue
        m = re.match(r"#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(", line)
        if m and tid is not None and m[1] != "??":
            stacks[tid].append(GCC_SUFFIX.sub("", m[1]))
    return stacks


def test_all_threads_records_threads_without_python_as_gdb_sees_them(tmp_path):
    """`-a --native` also samples the threads that have no Python thread state: OpenBLAS's
    worker (numpy from PyPI, two BLAS threads) gets its native stack alone. Checked
    against gdb on one frozen moment: with the process stopped (SIGSTOP), `tach dump
    --native` and gdb's `thread apply all bt` name the same functions in the worker, in
    the same order (gdb also names libc's `start_thread` and `clone3` from Debian's debug
    symbols: tach, reading the stripped libc, shows their offsets)."""
    py = venv()
    script = os.path.join(tmp_path, "blas.py")
    with open(script, "w") as f:
        f.write("import os, sys, time\n"
                "os.environ['OPENBLAS_NUM_THREADS'] = '2'\n"
                "import numpy as np\n"
                "a = np.random.rand(600, 600)\n"
                "print('ready', flush=True)\n"
                "end = time.time() + float(sys.argv[1])\n"
                "while time.time() < end:\n"
                "    a @ a\n")
    proc = subprocess.Popen([py, script, "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        tasks = len(os.listdir(f"/proc/{proc.pid}/task"))
        if tasks < 2:
            pytest.skip(f"SKIPPED: -a --native: OpenBLAS started no worker thread here ({tasks})")
        out = os.path.join(tmp_path, "blas.tach")
        p = tach("record", "--native", "-a", "-d", "3", "--pid", str(proc.pid), "-o", out)
        assert p.returncode == 0, p.stderr
        m = re.search(r"(\d+) threads? without Python \(native frames only\)", p.stderr)
        assert m and int(m[1]) == tasks - 1, (tasks, p.stderr)
        info = tach("info", out)
        assert re.search(rf"threads\s+{tasks}\n", info.stdout), info.stdout
        assert tach("verify", out).returncode == 0
        collapsed = os.path.join(tmp_path, "blas.txt")
        assert tach("export", "--collapsed", "-o", collapsed, out).returncode == 0
        workers = {stack for stack in collapsed_counts(collapsed)
                   if not stack.startswith(f"tid:{proc.pid};")}
        assert any(":blas_thread_server:" in s for s in workers), sorted(workers)[:5]
        # No Python frame in a worker's stack.
        assert not any(".py:" in s for s in workers), sorted(workers)[:5]

        if gdb_binary() is None:
            pytest.skip("SKIPPED: -a --native against gdb: gdb could not be installed here")
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            time.sleep(0.2)
            d = tach("dump", "--native", "--json", str(proc.pid))
            assert d.returncode == 0, d.stderr
            ours = {t["thread_id"]: [f["function"] for f in t["frames"]] for t in json.loads(d.stdout)}
            theirs = gdb_stacks(proc.pid)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert set(ours) == set(theirs), (sorted(ours), sorted(theirs))
        compared = 0
        for tid, names in ours.items():
            if tid == proc.pid:
                continue
            named = [n for n in names if "+0x" not in n]
            gdb_named = [n for n in theirs[tid] if n not in ("start_thread", "clone3", "clone")]
            assert named == gdb_named, (tid, names, theirs[tid])
            compared += 1
        assert compared == tasks - 1
    finally:
        proc.kill()
        proc.wait()


# Native functions py-spy names among a program's largest where tach, rightly, does not:
# the call to PyGILState_Ensure in _CallPythonObject returns to 0xf7e4 of pyenv 3.12.1's
# _ctypes module, which addr2line gives as the inlined Py_SIZE <- PyTuple_GET_SIZE of the
# next statement (callbacks.c:151); the call itself, 0xf7e3, is callbacks.c:148, where
# tach puts the frame.
NAMED_AT_RETURN_ADDRESS = {"qsort": {"PyTuple_GET_SIZE", "Py_SIZE"}}

# The native callers of OpenBLAS's kernels under numpy's svd, which py-spy loses where a
# kernel has no unwind entry (OPEN_GAPS["svd"]).
SVD_KERNEL_CALLERS = {"dispatcher_vectorcall", "ufunc_generic_fastcall",
                      "PyUFunc_GeneralizedFunctionInternal", "generic_wrapped_legacy_loop",
                      "svd_wrapper<double>", "scipy_dgesdd_64_"}

# Programs whose largest gap against py-spy is known to exceed the bound, and why.
OPEN_GAPS = {
    "svd": "py-spy loses the native callers of OpenBLAS's assembly kernels that have no "
           "unwind entry (dcopy_k_SKYLAKEX, dnrm2_k_SKYLAKEX: 4-5% of its samples read "
           "`svd -> dcopy_k_SKYLAKEX`), where gdb (a breakpoint inside dcopy_k_SKYLAKEX, "
           "then bt) and tach give dlasd3 <- ... <- svd_wrapper <- ufunc_generic_fastcall "
           "<- dispatcher_vectorcall: those callers' inclusive shares differ by the lost "
           "samples; every self share and the other inclusive ones are held below",
    "qsort": "py-spy looks a caller's frame up at its return address, tach (as gdb and "
             "addr2line) at the call before it: where _CallPythonObject's inlined Py_DECREF "
             "(object.h:706) calls the hidden subtype_dealloc, py-spy shows "
             "_CallPythonObject (the address after the call is callbacks.c:283), tach and "
             "gdb show Py_DECREF (13-14% of tach's samples, 5 of 40 gdb backtraces; "
             "docs/recorder.md)",
    "orjson": "py-spy does not name orjson's exported `loads` and `dumps` (their code has "
              "no other symbol: the wheel is stripped to its exports), gdb does, as tach: "
              "their inclusive shares differ by the whole call (48 and 17 points); the "
              "other rows are held below",
}


@pytest.mark.parametrize("where", ["outside", "in-process"])
def test_native_accuracy_against_pyspy_same_process(tmp_path, where):
    """py-spy 0.4 --native and tach --native (`tach record --pid` from outside, or
    `python -m tach run` in the process) on one execution of each native program: the 15
    largest functions' shares, and the names of native functions."""
    py = venv()
    if where == "outside":
        how = ["--attach", TACH]
    else:
        # The one abi3 extension tests/python/run.sh built into python/tach/.
        if not glob.glob(os.path.join(REPO, "python", "tach", "_native*.so")):
            pytest.skip("SKIPPED: native in-process: no built extension in python/tach")
        how = ["--tach-path", os.path.join(REPO, "python")]
    # In-process, the harness exports with the tach package it runs the program with.
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")) \
        if where == "in-process" else None
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > 2 * cores:
        # At a load of 16 on 2 cores both
        # profilers stop the same thread with ptrace and are descheduled while they hold
        # it; py-spy kept 5-15% of its samples, tach half its ticks, and the shares moved
        # by up to 21 points on a few hundred samples.
        pytest.skip(f"SKIPPED: native accuracy: load {load:.1f} on {cores} cores is too busy "
                    "for two ptrace samplers to share one process")
    programs = ["svd", "zlib", "json", "regex", "orjson", "qsort"]
    if not has_orjson(py):
        msg = "SKIPPED: native accuracy of orjson: orjson could not be installed from PyPI"
        print(msg, file=sys.stderr)
        if os.environ.get("TACH_SKIP_LOG"):
            with open(os.environ["TACH_SKIP_LOG"], "a") as f:
                f.write(msg + "\n")
        programs.remove("orjson")
    bound = float(os.environ.get("TACH_NATIVE_GAP", "3"))

    def measure(names, attempt):
        out = tmp_path / f"native-{attempt}.json"
        run = subprocess.run(
            [py, HARNESS, "--native", "--same-process", *how, "--python", py,
             "--programs", ",".join(names), "--rate", "200", "--seconds", "10",
             "--json", str(out)],
            capture_output=True, text=True, timeout=1200, cwd=REPO, env=env)
        print(run.stdout, file=sys.stderr)
        assert run.returncode == 0, run.stdout + run.stderr
        return json.loads(out.read_text())["results"]

    def held_gap(name, r):
        """The gap this test holds to `bound` for one program, and where it is."""
        if name == "orjson":
            # Everything but the two names py-spy does not give (1.3 points
            # at most on a quiet machine, 3.4 on a loaded CI machine; orjson.so's own share is
            # 61-65% of 2,000 samples, whose sampling error alone is about 1.5 points).
            return max((max(abs(so - sr), abs(io - ir)), func)
                       for file, func, so, sr, io, ir in r["rows"]
                       if func not in ("loads", "dumps"))
        if name == "svd":
            # Self shares, and the inclusive shares of all but the kernels' callers that
            # py-spy loses.
            return max((max(abs(so - sr), 0 if func in SVD_KERNEL_CALLERS else abs(io - ir)),
                        func) for file, func, so, sr, io, ir in r["rows"])
        if name in OPEN_GAPS:
            return None
        return r["largest_gap"], r["where"]

    results = measure(programs, 1)
    for name, r in results.items():
        assert r["reference_samples"] > 300 and r["samples"] > 300, (name, r)
        # At most 1% of ticks with errors: outside and in-process they are
        # 0.00-0.28% (qsort's ctypes callbacks were 0.5-1.3% until a held
        # thread stopped at a half-linked moment was let run on; svd 1.85-4.11% until
        # numpy's realigned sort frames were walked; docs/recorder.md).
        assert r["error_rate"] <= 1.0, (name, r["error_rate"])
        # Every native function py-spy names among the largest, tach names the same.
        for file, func, s_ours, s_ref, i_ours, i_ref in r["rows"]:
            if file == "native" and i_ref >= 5.0 and \
                    func not in NAMED_AT_RETURN_ADDRESS.get(name, ()):
                assert i_ours > 0.0, (name, func, i_ref)
        if name in OPEN_GAPS:
            print(f"OPEN: native accuracy of {name}: largest gap {r['largest_gap']:.1f} "
                  f"points ({r['where']}): {OPEN_GAPS[name]}", file=sys.stderr)
    # The goal is 2 points; 3 is what test_accuracy holds on a quiet machine for
    # Python stacks. Three programs have rows where py-spy is the one that is wrong
    # (OPEN_GAPS, each checked against gdb; docs/recorder.md): svd and orjson are held
    # without those rows, qsort's gap (5.3-7.3 points, all naming) is printed only.
    # Two samplers taking turns on one process are each a sample of ~2,000 ticks: a share
    # near 60% differs between them by 1.5 points (one standard error) from sampling alone,
    # so a program whose gap passes the bound is measured once more, on a new execution,
    # and the test fails when both executions pass it. A real (systematic) gap fails twice.
    over = {name: g for name, r in results.items()
            if (g := held_gap(name, r)) is not None and g[0] > bound}
    if over:
        print(f"RETRIED: native accuracy over {bound} points in the first execution: {over}",
              file=sys.stderr)
        again = measure(list(over), 2)
        still = {name: (over[name], g) for name, r in again.items()
                 if (g := held_gap(name, r)) is not None and g[0] > bound}
        assert not still, f"native accuracy over {bound} points in two executions: {still}"


def fde_starts(path):
    """{start: end} of the functions of the ELF file `path` by its unwind table: the
    `pc=START..END` of each FDE `readelf --debug-dump=frames` lists."""
    p = subprocess.run(["readelf", "--wide", "--debug-dump=frames", path], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert p.returncode == 0, p.stderr
    return {int(a, 16): int(b, 16)
            for a, b in re.findall(r" FDE cie=\w+ pc=([0-9a-f]+)\.\.([0-9a-f]+)", p.stdout)}


def test_a_stripped_librarys_function_is_one_row_at_its_start(tmp_path):
    """Debian's libz is stripped: its static functions (deflate's longest_match,
    deflate_slow, ...) have no symbol. Each is named by its start, so that `tach top`
    shows one row per function, and each start is one of the library's FDEs (readelf's
    reading of its .eh_frame), named by no other row. About 5 s."""
    py = pyenv_or_skip("3.12")
    if shutil.which("readelf") is None:
        pytest.skip("SKIPPED: stripped library names: readelf (binutils) is not installed")
    out, _ = record([py], str(tmp_path), 3)
    p = tach("top", "--format", "json", "--limit", "100000", out)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    named = [(r.get("filename") or r.get("file", ""), r.get("function") or r.get("funcname", ""))
             for r in rows]
    libz = [(f, fn) for f, fn in named if re.fullmatch(r"libz\.so[.\d]*\+0x[0-9a-f]+", fn)]
    assert libz, named[:20]
    path = libz[0][0]
    starts = fde_starts(path)
    offsets = [int(fn.rsplit("+0x", 1)[1], 16) for _, fn in libz]
    print(f"{len(libz)} rows of {os.path.basename(path)} without a symbol: "
          f"{sorted(hex(o) for o in offsets)}", file=sys.stderr)
    assert all(o in starts for o in offsets), (offsets, sorted(starts)[:20])
    assert len(set(offsets)) == len(offsets), offsets
