"""The `tach-record` wheel (packaging/tach-record): the recorder alone, without polars.

Run by tests/python/run_record_wheel.sh inside a fresh virtual environment holding only
that wheel and pytest. The program recorded is the standard library's own compileall
(code nobody here wrote) over a copy of a few stdlib packages.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import pytest

BIN = pathlib.Path(sys.executable).parent
TACH = str(BIN / "tach")
# A download of at most 10 MB: the small install must stay small.
MAX_WHEEL_BYTES = 10 * 1024 * 1024


def test_nothing_but_the_wheel_and_pytest_is_installed():
    with pytest.raises(ImportError):
        import polars  # noqa: F401
    import tach

    assert tach._native.HAS_QUERY is False
    size = os.path.getsize(os.environ["TACH_RECORD_WHEEL"])
    assert size <= MAX_WHEEL_BYTES, f"wheel is {size} bytes"


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A copy of a few stdlib packages for compileall to compile (no .pyc yet)."""
    root = tmp_path_factory.mktemp("src")
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    for name in ["email", "json", "logging", "unittest", "xml", "asyncio"]:
        shutil.copytree(stdlib / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def hottest(path):
    """The names `tach top` prints for a recording, with the wheel's own command, by total
    time: compileall's own functions have almost no self time (a CI run on 3.12 listed
    40 functions of one sample each above them, sorted by self)."""
    out = subprocess.run([TACH, "top", "-l", "40", "--sort", "total", "--by", "function",
                          str(path)],
                         capture_output=True, text=True, check=True).stdout
    return out


def check(path):
    verified = subprocess.run([TACH, "verify", str(path)], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr
    top = hottest(path)
    # compileall's own functions, not ours: the recording saw the real program.
    assert "compile_dir" in top or "compile_file" in top, top


def test_python_m_tach_run_records_in_process(tmp_path, sources):
    out = tmp_path / "inproc.tach"
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path / "pyc1"))
    subprocess.run([sys.executable, "-m", "tach", "run", "-q", "-o", str(out), "-m",
                    "compileall", "-q", "-f", str(sources)], check=True, env=env)
    check(out)


def test_tach_profile_records_in_process(tmp_path, sources):
    out = tmp_path / "ctx.tach"
    code = (
        "import compileall, sys, tach\n"
        f"with tach.profile({str(out)!r}):\n"
        f"    compileall.compile_dir({str(sources)!r}, quiet=1, force=True)\n"
    )
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path / "pyc2"))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    check(out)


def test_tach_record_from_outside(tmp_path, sources):
    out = tmp_path / "outside.tach"
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path / "pyc3"))
    subprocess.run([TACH, "record", "-o", str(out), "--", sys.executable, "-m",
                    "compileall", "-q", "-f", str(sources)], check=True, env=env)
    check(out)


def test_reading_in_python_and_sql_say_where_they_are():
    import tach

    with pytest.raises(AttributeError, match="pip install tach"):
        tach.open
    done = subprocess.run([TACH, "query", "select 1", "x.tach"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "built without SQL" in done.stderr
