"""Our pstats / jsonl / gecko exports equal CPython 3.15.2's `replay` outputs."""
import json
import marshal
import re

import pytest

from conftest import NAMES, golden_bytes


@pytest.mark.parametrize("name", NAMES)
def test_pstats_equals_cpython(exported, name):
    # Host Python (3.11) reads 3.15's marshal output: the types involved predate 3.4.
    expected = marshal.loads(golden_bytes(name, ".pstats"))
    got = marshal.loads(exported("pstats")[name].read_bytes())
    assert expected[("__sampled__",)] is True
    assert got == expected
    assert list(got) == list(expected), "dict order differs"


def _without_run_id(text):
    return [{k: v for k, v in json.loads(line).items() if k != "run_id"}
            for line in text.splitlines()]


@pytest.mark.parametrize("name", NAMES)
def test_jsonl_equals_cpython_except_run_id(exported, name):
    expected = golden_bytes(name, ".jsonl").decode()
    got = exported("jsonl")[name].read_text()
    assert _without_run_id(got) == _without_run_id(expected)
    assert len({json.loads(l)["run_id"] for l in got.splitlines()}) == 1
    # Byte-identical too, once the random run_id is masked.
    mask = lambda s: re.sub(r'"run_id":"[0-9a-f]{32}"', '"run_id":"X"', s)
    assert mask(got) == mask(expected)


def _gecko_normalized(data):
    d = json.loads(data)
    strings = d["shared"].pop("stringArray")
    meta = d["meta"]
    # The replaying process's clock and host, not the profile's content.
    for key in ("startTime", "abi", "oscpu", "platform", "physicalCPUs", "logicalCPUs"):
        del meta[key]
    for t in d["threads"]:
        del t["pid"]
        for table, col in (("funcTable", "name"), ("funcTable", "fileName"),
                           ("resourceTable", "name"), ("markers", "name")):
            t[table][col] = [None if i is None else strings[i] for i in t[table][col]]
    return d


@pytest.mark.parametrize("name", NAMES)
def test_gecko_equals_cpython_after_resolving(exported, name):
    expected = _gecko_normalized(golden_bytes(name, ".gecko.json"))
    got = _gecko_normalized(exported("gecko")[name].read_bytes())
    assert got["meta"] == expected["meta"]
    assert [t["name"] for t in got["threads"]] == [t["name"] for t in expected["threads"]]
    for tg, te in zip(got["threads"], expected["threads"]):
        for key in te:
            assert tg[key] == te[key], f"{te['name']}: {key}"
    assert got == expected


_STATS_SCRIPT = r"""
import pstats, sys
names = sys.argv[1:]
half = len(names) // 2
def load(path):
    try:
        return pstats.Stats(path)
    except TypeError:  # pstats refuses a profile with no entries
        return None
for ours, golden in zip(names[:half], names[half:]):
    a, b = load(ours), load(golden)
    assert (a is None) == (b is None), ours
    if b is not None:
        assert type(a) is type(b) is pstats.SampledStats, ours
        assert a.stats == b.stats, ours
        assert (a.total_tt, a.total_calls, a.prim_calls) == (b.total_tt, b.total_calls, b.prim_calls), ours
print("ok", half)
"""


def test_pstats_loads_in_cpython_315_pstats(exported, chroot, workdir):
    """CPython 3.15's own pstats.Stats reads our files and sees the same stats."""
    ours = [str(exported("pstats")[n]) for n in NAMES]
    golden = []
    for n in NAMES:
        p = workdir / f"golden-{n}.pstats"
        p.write_bytes(golden_bytes(n, ".pstats"))
        golden.append(str(p))
    script = workdir / "check_pstats.py"
    script.write_text(_STATS_SCRIPT)
    r = chroot("python3.15", str(script), *ours, *golden)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"ok {len(NAMES)}"
