"""Every Python front end takes exactly the fields of the spec it fills.

The specs are declared once, in Rust (RecordSpec, FilterSpec, TopOptions, DiffOptions);
the extension lists their fields (``tach._native.SPEC_FIELDS``). These tests hold
``tach.start``, ``python -m tach run``, ``%%tach``, ``Profile.export``/``tach.convert``,
``Profile.top``, ``tach.diff`` and the type stub to those lists, so a front end that
misses a field, or takes one the spec does not have, fails here.
"""

import ast
import importlib.metadata
import re
from pathlib import Path

import pytest

import tach
from tach import _native

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "golden" / "cpython-3.15.2"
FIELDS = _native.SPEC_FIELDS

# tach.start()'s own spellings of RecordSpec fields (src/python/record.rs): the file is
# the positional path, gc=False is no_gc, blocking=False is no_blocking; and `hidden`,
# the package's own frames, is tach.start()'s alone.
START_NOT_KEYWORDS = {"output", "no_gc", "no_blocking"}
START_OWN_KEYWORDS = {"gc", "hidden"}
# The command line takes a rate; the interval is tach.start()'s alone.
NOT_FLAGS = {"interval_us"}


def start_keywords():
    return (set(FIELDS["record"]) - START_NOT_KEYWORDS) | START_OWN_KEYWORDS


def known_keywords(call):
    """The keywords a function says it knows, from its TypeError for an unknown one."""
    with pytest.raises(TypeError) as e:
        call(not_a_field_of_any_spec=1)
    message = str(e.value)
    assert "not_a_field_of_any_spec" in message
    return set(message.split("known: ", 1)[1].split(", "))


def test_the_specs_list_their_fields():
    assert FIELDS["filter"] == ["threads", "start", "end", "since", "until", "status"]
    assert {"by", "sort", "limit", "per_file"} == set(FIELDS["top"])
    assert {"by", "metric", "alpha", "min_share", "min_change", "base_since", "base_until"} == set(FIELDS["diff"])
    assert {"output", "rate", "mode", "all_threads", "native"} <= set(FIELDS["record"])


def test_start_takes_exactly_the_record_spec():
    assert known_keywords(lambda **kw: _native.start(None, **kw)) == start_keywords()
    # tach.start() passes its options through (quiet is its own).
    assert known_keywords(lambda **kw: tach.start(None, **kw)) == start_keywords()
    with pytest.raises(TypeError, match=r"tach.start\(\) got an unexpected keyword 'rat'"):
        tach.start(None, rat=10)
    with pytest.raises(ValueError, match="unknown mode 'bogus': use wall, cpu, gil or exception"):
        tach.start(None, mode="bogus")
    with pytest.raises(ValueError, match="the rate must be a positive number"):
        tach.start(None, rate=float("nan"))
    with pytest.raises(ValueError):
        tach.start(None, rate="fast")
    assert not tach.is_running()


def test_start_returns_every_record_stats_field(tmp_path):
    out = tmp_path / "s.tach"
    tach.start(out, rate=2000, all_threads=True, gc=False, blocking=False)
    stats = tach.stop(quiet=True)
    assert stats["path"] == str(out) and out.exists()
    assert stats["summary"] and stats["samples"] >= 0 and stats["error"] is None
    # RecordStats' fields (src/record/sampler) through serde, and the summary line: the
    # keys the dict has always had.
    assert set(stats) == {
        "path", "summary", "paused_ticks", "pause_timeouts", "samples", "ticks",
        "error_ticks", "dropped", "filtered", "duration_sec", "sample_rate", "error_rate",
        "missed_samples", "expected_ticks", "threads", "frames", "strings", "file_size",
        "code_objects", "reused_addresses", "sampler_cpu_sec", "error", "segments",
    }
    assert isinstance(stats["duration_sec"], float) and isinstance(stats["samples"], int)


def flags_in_help(text):
    return set(re.findall(r"--([a-z][a-z-]*)", text))


def test_python_m_tach_run_and_the_cell_magic_take_every_recording_flag():
    want = {f.replace("_", "-") for f in FIELDS["record"] if f not in NOT_FLAGS}
    _, run_help, code = _native.parse_main(["python -m tach", "run", "--help"])
    assert code == 0
    assert want <= flags_in_help(run_help)
    _, cell_help, code = _native.parse_cell(["--help"])
    assert code == 0
    assert want <= flags_in_help(cell_help)
    # Nothing else but the front end's own -q and --help.
    assert flags_in_help(cell_help) - want == {"quiet", "help"}


def test_export_convert_top_and_diff_take_exactly_their_specs(tmp_path):
    p = tach.open(GOLDEN / "cpu_recursive.bin")
    filters = set(FIELDS["filter"])
    # export/convert: the filter, the title, and the formats' own options.
    with pytest.raises(TypeError) as e:
        p.export("collapsed", not_a_field_of_any_spec=1)
    known = set(str(e.value).split(": use ", 1)[1].split(", "))
    assert filters | {"title"} <= known
    with pytest.raises(TypeError) as e:
        tach.convert([GOLDEN / "cpu_recursive.bin"], "collapsed", tmp_path, colour=1)
    assert filters <= set(str(e.value).split(": use ", 1)[1].split(", "))
    for name in filters:
        with pytest.raises(TypeError, match="unexpected keyword 'not_a_field'"):
            p._native.export("collapsed", None, **{name: None}, not_a_field=1)
    assert known_keywords(lambda **kw: _native.top_json([], **kw)) == set(FIELDS["top"]) | filters
    assert known_keywords(lambda **kw: p.top(**kw)) == set(FIELDS["top"]) | filters
    diff = set(FIELDS["diff"]) | filters
    assert known_keywords(lambda **kw: _native.diff_json([], [], **kw)) == diff
    assert known_keywords(lambda **kw: tach.diff([], [], **kw)) == diff
    # Every field is taken (with a value that changes nothing here).
    every = {"by": "function", "sort": "self", "limit": None, "per_file": False,
             "threads": None, "start": None, "end": None, "status": None,
             "since": None, "until": None}
    assert set(every) == set(FIELDS["top"]) | filters
    assert p.top(**every).equals(p.top())
    assert p.top(per_file=True).columns[0] == "file"
    assert p.top(threads=int(p.samples()["thread_id"][0])).height > 0


def stub_keywords(name):
    """The keyword-only parameters of `name` in tach/_native.pyi (a method: Class.name)."""
    tree = ast.parse((Path(tach.__file__).parent / "_native.pyi").read_text())
    owner, _, func = name.rpartition(".")
    scope = tree.body
    if owner:
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner).body
    node = next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == func)
    return {a.arg for a in node.args.kwonlyargs}


def test_the_stub_lists_the_specs_keywords():
    filters = set(FIELDS["filter"])
    assert stub_keywords("start") == start_keywords()
    assert stub_keywords("top_json") == set(FIELDS["top"]) | filters
    assert stub_keywords("diff_json") == set(FIELDS["diff"]) | filters
    assert stub_keywords("NativeProfile.export") == filters | {"title", "options"}
    assert stub_keywords("convert") == filters | {"title", "options"}


def test_version_is_the_crates():
    cargo = (ROOT / "Cargo.toml").read_text()
    crate = re.search(r'^version = "([^"]+)"', cargo, re.M).group(1)
    assert tach.__version__ == _native.__version__ == crate
    assert importlib.metadata.version("tach") == crate

