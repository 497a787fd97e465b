"""Wall-clock time: the origin a recording keeps in its footer, `samples.wall_time` in
`tach query` (TACH files and Parquet datasets, DuckDB), and the --since/--until window.

Two real recordings of a short program (the built tach binary, the host's Python), each
about half a second. Sample times are counted independently of tach: CPython 3.15's own
reader (in the chroot) decodes each file's timestamps, and the origin is read from the
footer's bytes here. About 10 s in all.

Run (after `cargo build`): python3 -m pytest tests/python/test_wall_time.py -q
"""

import datetime
import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import time

import duckdb
import pytest

from conftest import CHROOT, REPO, built_tach, skip_loudly

PROGRAM = textwrap.dedent("""
    import json, sys, time
    # The program's own (wall, monotonic) pair: CPython's monotonic clock is the one
    # the samples' timestamps are read from.
    print(json.dumps({"wall": time.time(), "mono": time.monotonic()}), flush=True)
    end = time.monotonic() + 0.5
    n = 0
    while time.monotonic() < end:
        n += 1
""")

# Prints the thread-sample timestamps of a TACH file as CPython 3.15's reader replays it.
CPYTHON_TIMESTAMPS = textwrap.dedent("""
    import json, sys
    from profiling.sampling.binary_reader import BinaryReader
    from profiling.sampling.collector import Collector

    class Times(Collector):
        def __init__(self):
            self.times = []
        def collect(self, stack_frames, timestamps_us=None):
            threads = sum(len(i.threads) for i in stack_frames)
            for t in timestamps_us or []:
                self.times.extend([t] * threads)
        def export(self, filename):
            pass

    with BinaryReader(sys.argv[1]) as r:
        c = Times()
        r.replay_samples(c)
    print(json.dumps(c.times))
""")


def tach(*args):
    out = subprocess.run([built_tach(), *map(str, args)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def query(sql, *inputs):
    return json.loads(tach("query", sql, *inputs, "--format", "json"))


def micros(iso):
    """`2026-11-28T14:05:00.123456Z` as µs since the Unix epoch, exactly."""
    t = datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return (t - epoch) // datetime.timedelta(microseconds=1)


def iso(us):
    t = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + \
        datetime.timedelta(microseconds=us)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def origin_of(path):
    """(start_time_us, wall origin µs) from the file's bytes: the header's u64 at 12,
    the footer's i64 at -16 followed by the marker WALL (a little-endian file)."""
    data = open(path, "rb").read()
    assert data[:4] == b"HCAT"
    (start,) = struct.unpack_from("<Q", data, 12)
    (origin,) = struct.unpack_from("<q", data, len(data) - 16)
    assert data[-8:-4] == b"WALL", data[-32:]
    return start, origin


@pytest.fixture(scope="module")
def segments():
    """Two recordings in one directory: [(path, program's clocks, before, after)]."""
    # Under the repository (below /work), so the chroot sees the files at their path.
    work = os.path.join(REPO, f".pytest-wall-{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    prog = os.path.join(work, "prog.py")
    with open(prog, "w") as f:
        f.write(PROGRAM)
    runs = []
    for name in ["a.tach", "b.tach"]:
        out = os.path.join(work, name)
        before = time.time()
        p = subprocess.run([built_tach(), "record", "-o", out, "--", sys.executable, prog],
                           capture_output=True, text=True)
        after = time.time()
        assert p.returncode == 0, p.stderr
        clocks = json.loads(p.stdout.splitlines()[0])
        runs.append((out, clocks, before, after))
    yield work, runs
    shutil.rmtree(work, ignore_errors=True)


def test_the_first_wall_time_is_when_the_program_ran(segments):
    _, runs = segments
    path, clocks, before, after = runs[0]
    row = query("select min(wall_time) as w, min(timestamp_us) as t, count(*) as n, "
                "count(wall_time) as nw from samples", path)[0]
    assert row["n"] > 10 and row["nw"] == row["n"]
    first = micros(row["w"])
    # The program's own clock pair says when its monotonic time t was.
    expected = clocks["wall"] * 1e6 + (row["t"] - clocks["mono"] * 1e6)
    assert abs(first - expected) < 10_000, (first, expected)
    assert before * 1e6 <= first <= after * 1e6
    # Every sample: wall_time - timestamp_us is the file's origin - start.
    start, origin = origin_of(path)
    rows = query("select distinct cast(wall_time as bigint) - timestamp_us as d from samples",
                 path)
    # polars casts a timestamp to its µs since the epoch.
    assert [r["d"] for r in rows] == [origin - start]


def test_cpython_replays_and_tach_verifies_a_file_with_an_origin(segments, chroot):
    _, runs = segments
    for path, *_ in runs:
        tach("verify", path)
        p = chroot("python3.15", "-c", CPYTHON_TIMESTAMPS, path)
        assert p.returncode == 0, p.stderr
        assert len(json.loads(p.stdout)) == query("select count(*) as n from samples", path)[0]["n"]


def cpython_wall_times(chroot, path):
    p = chroot("python3.15", "-c", CPYTHON_TIMESTAMPS, path)
    assert p.returncode == 0, p.stderr
    start, origin = origin_of(path)
    return [origin + t - start for t in json.loads(p.stdout)]


def test_a_window_across_two_files_keeps_exactly_its_samples(segments, chroot):
    work, runs = segments
    walls = [cpython_wall_times(chroot, path) for path, *_ in runs]
    a, b = sorted(walls[0]), sorted(walls[1])
    # From the middle of the first recording to the middle of the second.
    since, until = a[len(a) // 2], b[len(b) // 2]
    want = sum(since <= w < until for w in a + b)
    assert 0 < want < len(a) + len(b)
    window = ["--since", iso(since), "--until", iso(until)]
    # tach top over the directory of both files (their .tach files in time order).
    top = json.loads(tach("top", work, *window, "--format", "json"))
    assert top["samples"] == want
    # The same window as SQL over the files.
    sql = (f"select count(*) as n from samples where cast(wall_time as bigint) >= {since} "
           f"and cast(wall_time as bigint) < {until}")
    assert query(sql, *(p for p, *_ in runs))[0]["n"] == want
    # With an offset: the same instants.
    plus2 = datetime.timezone(datetime.timedelta(hours=2))
    local = lambda us: datetime.datetime.fromtimestamp(us / 1e6, plus2).isoformat(
        timespec="microseconds")
    top = json.loads(tach("top", work, "--since", local(since), "--until", local(until),
                          "--format", "json"))
    assert top["samples"] == want


def test_a_window_on_a_file_without_an_origin_names_it(segments):
    cpython_file = os.path.join(REPO, "golden", "cpython-3.15.2", "threads_mixed.bin")
    p = subprocess.run([built_tach(), "top", cpython_file, "--since", "14:00"],
                       capture_output=True, text=True)
    assert p.returncode != 0
    assert "threads_mixed.bin: no wall-clock time recorded" in p.stderr, p.stderr
    # Without a window it has a null wall_time.
    row = query("select count(wall_time) as nw, count(*) as n from samples", cpython_file)[0]
    assert row["nw"] == 0 and row["n"] > 0


def test_duckdb_reads_the_exported_wall_time_as_a_timestamp(segments, tmp_path):
    _, runs = segments
    paths = [p for p, *_ in runs]
    ds = tmp_path / "ds"
    tach("export", "--parquet", "--out-dir", ds, *paths)
    con = duckdb.connect()
    rel = con.execute(f"select wall_time from read_parquet('{ds}/samples/*/*.parquet')")
    assert str(rel.description[0][1]).upper() in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMP_TZ")
    got = sorted(r[0] for r in con.execute(
        f"select epoch_us(wall_time) from read_parquet('{ds}/samples/*/*.parquet')").fetchall())
    want = sorted(micros(r["w"]) for r in query("select wall_time as w from samples", *paths))
    assert got == want
    # tach query over the dataset gives the same column.
    over_ds = sorted(micros(r["w"]) for r in query("select wall_time as w from samples", ds))
    assert over_ds == want


def test_a_dataset_of_schema_version_3_still_reads(segments, tmp_path):
    """tests/data/parquet-v3: a dataset written before wall_time was stored."""
    old = os.path.join(REPO, "tests", "data", "parquet-v3")
    row = query("select count(*) as n, count(wall_time) as nw from samples", old)[0]
    assert row["n"] > 0 and row["nw"] == 0
    # Mixed with partitions of the current version (an incremental export after an
    # upgrade): the old rows are null, the new ones are there.
    ds = tmp_path / "mixed"
    shutil.copytree(old, ds)
    path = segments[1][0][0]
    tach("export", "--parquet", "--out-dir", ds, path)
    new = query("select count(*) as n from samples", path)[0]["n"]
    row = query("select count(*) as n, count(wall_time) as nw from samples", ds)[0]
    assert (row["n"], row["nw"]) == (new + query("select count(*) as n from samples", old)[0]["n"], new)


def test_sql_compares_wall_time_with_a_string_and_truncates_it_as_duckdb(segments, tmp_path):
    """`wall_time >= '2026-11-28T14:05:00Z'` (and without the Z, with a space, BETWEEN)
    compares as a timestamp, and `date_trunc(unit, wall_time)` for second, minute, hour
    and day: the same rows and values as DuckDB (TimeZone UTC) over the exported
    dataset of the same files."""
    _, runs = segments
    paths = [p for p, *_ in runs]
    ds = tmp_path / "ds"
    tach("export", "--parquet", "--out-dir", ds, *paths)
    con = duckdb.connect()
    con.execute("set TimeZone = 'UTC'")
    table = f"read_parquet('{ds}/samples/*/*.parquet')"

    def duck(sql):
        return con.execute(sql.replace("samples", table)).fetchall()

    walls = [r["w"] for r in query("select wall_time as w from samples order by w", *paths)]
    # A sample's own time, half way (ties count for >=), and the second file's first.
    mid, second = walls[len(walls) // 2], query(
        "select min(wall_time) as w from samples", paths[1])[0]["w"]
    for cut in [mid, second]:
        spaced = cut.replace("T", " ").removesuffix("Z")
        for where in [f"wall_time >= '{cut}'", f"wall_time < '{spaced}'",
                      f"'{cut}' <= wall_time", f"wall_time = '{cut}'",
                      f"wall_time between '{walls[0]}' and '{spaced}'"]:
            sql = f"select count(*) as n from samples where {where}"
            got = query(sql, *paths)[0]["n"]
            assert got == duck(sql)[0][0], (where, got)
            assert 0 < got < len(walls) or "=" in where, (where, got)
    # A date alone is its midnight (UTC), on either side.
    day = walls[0][:10]
    for where in [f"wall_time >= '{day}'", f"'{day}' <= wall_time", f"wall_time < '{day}'"]:
        sql = f"select count(*) as n from samples where {where}"
        assert query(sql, *paths)[0]["n"] == duck(sql)[0][0], where

    for unit in ["second", "minute", "hour", "day"]:
        sql = (f"select date_trunc('{unit}', wall_time) as t, count(*) as n from samples "
               "group by t order by t")
        got = [(micros(r["t"]), r["n"]) for r in query(sql, *paths)]
        want = duck(sql.replace(f"date_trunc('{unit}', wall_time) as t",
                                f"epoch_us(date_trunc('{unit}', wall_time)) as t"))
        assert got == [tuple(w) for w in want], unit
        # Every sample in the truncated time's unit: no later than the sample.
        assert sum(n for _, n in got) == len(walls)
    # A truncated time compares with wall_time, and keeps DuckDB's name unaliased.
    sql = "select count(*) as n from samples where date_trunc('second', wall_time) < wall_time"
    assert query(sql, *paths)[0]["n"] == duck(sql)[0][0]
    row = query("select date_trunc('minute', wall_time) from samples limit 1", *paths)[0]
    assert list(row) == ["date_trunc('minute', wall_time)"], row
    r = subprocess.run([built_tach(), "query", "select date_trunc('week', wall_time) from samples",
                        *paths], capture_output=True, text=True)
    assert r.returncode != 0 and "second, minute, hour and day" in r.stderr, r.stderr
