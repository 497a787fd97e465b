"""Shared fixtures: build tach once (debug), export every golden file once per format
with the batch converter, and run things in the CPython 3.15 chroot when present."""
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "golden" / "cpython-3.15.2"
NAMES = sorted(p.name[:-4] for p in GOLDEN.glob("*.bin"))
CHROOT = REPO / "scripts" / "cpython-chroot"


sys.path.insert(0, str(REPO / "python" / "tests"))
from skiplog import pytest_runtest_logreport  # noqa: E402,F401  (a pytest hook)


def skip_loudly(why):
    """Says a check did not run, on stderr and as a pytest skip (which the hook above
    writes to TACH_SKIP_LOG for scripts/test-all's closing summary)."""
    print(f"SKIPPED: {why}", file=sys.stderr)
    pytest.skip(why)


def golden_bytes(name, suffix):
    """A CPython output from the golden corpus, gunzipped if stored as .gz."""
    plain = GOLDEN / f"{name}{suffix}"
    if plain.exists():
        return plain.read_bytes()
    return gzip.decompress((GOLDEN / f"{name}{suffix}.gz").read_bytes())


@pytest.fixture(scope="session")
def tach_bin():
    subprocess.run(["cargo", "build", "--quiet", "--bin", "tach"], cwd=REPO, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    exe = target / "debug" / "tach"
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


@pytest.fixture(scope="session")
def chroot():
    """Runs a command in the CPython chroot; skips LOUDLY when it is unavailable."""
    probe = subprocess.run([str(CHROOT), "run", "--", "true"], cwd=REPO,
                           capture_output=True, text=True)
    if probe.returncode == 3:
        skip_loudly(f"chroot: the CPython chroot is not available ({probe.stderr.strip()}); "
                    "CPython interop checks not run")
    assert probe.returncode == 0, f"{CHROOT} failed: {probe.stderr}"

    def run(*args):
        return subprocess.run([str(CHROOT), "run", "--", *args], cwd=REPO,
                              capture_output=True, text=True)

    return run
