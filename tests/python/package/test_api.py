"""The Python API (tach.open / query / convert / Writer) and the `tach` entry point,
checked against the golden files: CPython's own outputs beside each .bin, and the
CLI's answers. Run by tests/python/run_api.sh, which installs the wheel into a fresh
venv with polars and pyarrow."""

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import namedtuple
from pathlib import Path

import pytest

pl = pytest.importorskip(
    "polars", reason="SKIPPED: polars is not installed (tests/python/run_api.sh installs it)"
)
import tach  # noqa: E402

from conftest import GOLDEN, REPO  # noqa: E402

ROOT = Path(REPO)
BINS = sorted(GOLDEN.glob("*.bin"))
# The `tach` console command of this environment (the package's entry point).
TACH = shutil.which("tach", path=os.path.dirname(sys.executable)) or "tach"
# Small and medium files for the slower checks.
SOME = [GOLDEN / n for n in ("cpu_recursive.bin", "threads_mixed.bin", "synthetic_many_threads_none.bin")]


def cli(*args, check=True):
    """Runs the `tach` command; returns (exit status, stdout, stderr)."""
    r = subprocess.run([TACH, *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"tach {args} exited {r.returncode}: {r.stderr}")
    return r.returncode, r.stdout, r.stderr


def read_golden(path):
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def golden_sibling(bin_path, suffix):
    for p in (GOLDEN / (bin_path.stem + suffix), GOLDEN / (bin_path.stem + suffix + ".gz")):
        if p.exists():
            return read_golden(p)
    return None


def test_goldens_present():
    assert len(BINS) >= 18, f"golden files missing under {GOLDEN}"


# ---------------------------------------------------------------- open / info / len


@pytest.mark.parametrize("path", BINS, ids=lambda p: p.stem)
def test_open_counts_match_cli_and_cpython(path):
    p = tach.open(path)
    _, out, _ = cli("info", "--json", path)
    expected = json.loads(out)[0]
    assert len(p) == expected["sample_count"]
    assert p.info.sample_count == expected["sample_count"]
    assert p.info.thread_count == expected["thread_count"]
    assert p.info.python_version == expected["python_version"] == "3.15.2"
    assert p.samples().height == len(p)
    # CPython's own count for the files written from known inputs.
    fed = golden_sibling(path, ".expected.json")
    if fed is not None:
        assert len(p) == json.loads(fed)["writer_total_samples"]


def test_info_repr_is_readable():
    p = tach.open(GOLDEN / "threads_mixed.bin")
    text = repr(p.info)
    assert text.startswith("Info(\n")
    assert f"{len(p)} (thread-samples)" in text
    # The same text as `tach info` (the Rust FileInfo's Display), not a second rendering.
    _, out, _ = cli("info", GOLDEN / "threads_mixed.bin")
    assert text == "Info(\n" + out + ")"
    assert ("python", "3.15.2") in p.info._rows
    assert p.info.profiling_mode == "wall"
    assert repr(p) == f"<tach.Profile {GOLDEN / 'threads_mixed.bin'}: {len(p):,} samples>"


# ---------------------------------------------------------------- DataFrames


def cli_schema():
    """`tach query --schema`, parsed: {table: [(column, type name)]}."""
    _, out, _ = cli("query", "--schema")
    tables, current = {}, None
    for line in out.splitlines():
        if line.startswith("schema version"):
            continue
        if not line.startswith(" "):
            current = line.split()[0]
            tables[current] = []
        elif line.strip():
            name, dtype = line.split()[:2]  # then the column's meaning
            tables[current].append((name, dtype))
    return tables


POLARS_TYPES = {
    "string": pl.String,
    "boolean": pl.Boolean,
    "int32": pl.Int32,
    "int64": pl.Int64,
    "uint32": pl.UInt32,
    "uint64": pl.UInt64,
    "float64": pl.Float64,
    "timestamp": pl.Datetime("us", "UTC"),
}


@pytest.mark.parametrize("table", ["samples", "frames", "stacks"])
def test_dataframes_have_the_query_schema(table):
    schema = cli_schema()[table]
    p = tach.open(GOLDEN / "threads_mixed.bin")
    df = getattr(p, table)()
    assert isinstance(df, pl.DataFrame)
    assert df.columns == [c for c, _ in schema]
    assert [df.schema[c] for c, _ in schema] == [POLARS_TYPES[t] for _, t in schema]
    assert df.height > 0


@pytest.mark.parametrize("path", SOME + [GOLDEN / "stdlib_tests_large.bin"], ids=lambda p: p.stem)
def test_scan_equals_samples(path):
    p = tach.open(path)
    s = p.samples()
    lf = p.scan()
    assert isinstance(lf, pl.LazyFrame)
    assert lf.collect_schema() == s.schema
    assert lf.collect().equals(s)
    # Projections, filters (applied batch by batch), LIMIT and a bare row count.
    assert lf.select("lineno", "file", "time_s").collect().equals(s.select("lineno", "file", "time_s"))
    kept = pl.col("has_gil") & (pl.col("time_s") < 1)
    assert lf.filter(kept).select("sample", "funcname").collect().equals(
        s.filter(kept).select("sample", "funcname"))
    assert lf.head(7).collect().equals(s.head(7))
    assert lf.filter(~kept).head(3).collect().equals(s.filter(~kept).head(3))
    assert lf.select(pl.len()).collect().item() == s.height
    top = lambda f: f.group_by("funcname").len().sort("len", "funcname", descending=[True, False]).head(5)
    assert top(lf).collect().equals(top(s))


class _Recorder:
    """A NativeProfile stand-in that records what each scan asked the native side."""

    def __init__(self, native):
        self.native, self.asked = native, []

    def sample_batches(self, columns, limit):
        self.asked.append((columns, limit))
        return self.native.sample_batches(columns, limit)


def test_scan_reads_only_the_columns_asked():
    p = tach.open(GOLDEN / "threads_mixed.bin")
    rec = _Recorder(p._native)
    p._native = rec
    got = p.scan().group_by("funcname").len().collect()
    assert rec.asked == [(["funcname"], None)]
    assert got.sort("funcname").equals(tach.open(GOLDEN / "threads_mixed.bin").samples()
                                       .group_by("funcname").len().sort("funcname"))
    # The native batches hold exactly those columns, in the order asked.
    batch = pl.DataFrame(next(iter(rec.native.sample_batches(["lineno", "thread_id"], None))))
    assert batch.columns == ["lineno", "thread_id"]
    p.scan().head(5).collect()
    assert rec.asked[-1][1] == 5, "head(n) stops the native decode after n rows"
    with pytest.raises(ValueError, match="no column nope"):
        rec.native.sample_batches(["nope"], None)


def test_string_columns_round_trip():
    # Unicode, emoji, Windows paths, an empty and a 1.5 KB name: Arrow string views
    # (long and inline ones) must arrive intact.
    path = GOLDEN / "synthetic_many_threads_none.bin"
    fed = json.loads(golden_sibling(path, ".expected.json"))
    frames = tach.open(path).frames()
    assert frames.schema["funcname"] == pl.String
    assert set(frames["filename"].to_list()) | set(frames["funcname"].to_list()) == set(fed["strings"])
    # The same stream through pyarrow: the columns are Arrow string views.
    pa = pytest.importorskip("pyarrow")
    stream = tach._native.open_profile(str(path)).table("frames")
    t = pa.table(stream)
    assert t.schema.field("funcname").type == pa.string_view()
    assert t.column("funcname").to_pylist() == frames["funcname"].to_list()


def cli_json(sql, *paths):
    _, out, _ = cli("query", sql, *paths, "--format", "json")
    return json.loads(out)


QUERIES = [
    "select funcname, filename, count(*) as samples from samples "
    "group by funcname, filename order by samples desc, funcname, filename limit 10",
    "select thread_id, count(*) as samples, max(time_s) - min(time_s) as span_s "
    "from samples group by thread_id order by samples desc, thread_id",
    "select s.funcname, sum(c.samples) as samples "
    "from (select distinct file, stack_id, funcname from stacks) s "
    "join stack_counts c on s.file = c.file and s.stack_id = c.stack_id "
    "group by s.funcname order by samples desc, s.funcname limit 10",
    "select opname, count(*) as n from frames group by opname order by n desc, opname",
]


@pytest.mark.parametrize("path", SOME, ids=lambda p: p.stem)
@pytest.mark.parametrize("sql", QUERIES, ids=range(len(QUERIES)))
def test_query_equals_cli(path, sql):
    rows = tach.open(path).query(sql).to_dicts()
    assert rows == cli_json(sql, path)
    assert rows, "the query found nothing: a useless check"


def test_query_over_many_files_equals_cli():
    sql = ("select file, funcname, count(*) as n from samples group by file, funcname "
           "order by file, n desc, funcname")
    paths = [str(p) for p in SOME[:2]]
    df = tach.query(sql, paths)
    assert set(df["file"].unique()) == set(paths)
    assert df.to_dicts() == cli_json(sql, *paths)


# ---------------------------------------------------------------- export


@pytest.mark.parametrize("name", ["cpu_recursive", "threads_mixed", "synthetic_rle"])
def test_export_collapsed_is_cpythons(name, tmp_path):
    path = GOLDEN / f"{name}.bin"
    expected = golden_sibling(path, ".collapsed.txt").decode("utf-8")
    p = tach.open(path)
    text = p.export("collapsed")
    assert isinstance(text, str) and text == expected
    out = tmp_path / "x.txt"
    assert p.export("collapsed", out) is None
    assert out.read_text(encoding="utf-8") == expected


def test_export_binary_and_filters(tmp_path):
    import marshal

    p = tach.open(GOLDEN / "threads_mixed.bin")
    data = p.export("pstats")
    assert isinstance(data, bytes)
    assert marshal.loads(data) == marshal.loads((GOLDEN / "threads_mixed.pstats").read_bytes())
    import gzip

    pprof = p.export("pprof")
    assert isinstance(pprof, bytes) and gzip.decompress(pprof)
    assert p.export("pprof", tmp_path / "x.pb.gz") is None
    assert (tmp_path / "x.pb.gz").read_bytes() == pprof
    # pprof's time: every spelling of one instant gives the CLI's bytes; tests/suite/pprof.rs
    # checks the time itself with go tool pprof.
    import datetime

    when = datetime.datetime(2026, 11, 20, 11, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    cli(
        "export", "--pprof", "--start-time", "2026-11-20T10:00:00Z", "-o", tmp_path / "cli.pb.gz",
        GOLDEN / "threads_mixed.bin",
    )
    cli_pprof = (tmp_path / "cli.pb.gz").read_bytes()
    spellings = [when, 1795168800, 1795168800.0, "2026-11-20T10:00:00Z"]
    assert all(p.export("pprof", start_time=w) == cli_pprof for w in spellings)
    assert p.export("pprof", start_time="none") != cli_pprof
    for bad in ["yesterday", datetime.datetime(2026, 11, 20)]:
        with pytest.raises(ValueError, match="start.time"):
            p.export("pprof", start_time=bad)
    tid = p.samples()["thread_id"][0]
    one = p.export("collapsed", threads=tid)
    _, cli_out, _ = cli("export", "--collapsed", "--thread", tid, "-o", "-", GOLDEN / "threads_mixed.bin")
    assert one == cli_out and one != p.export("collapsed")
    with pytest.raises(TypeError, match="unknown filter"):
        p.export("collapsed", thread=1)
    with pytest.raises(tach.TachError, match="unknown format 'nope'"):
        p.export("nope")


@pytest.mark.parametrize("format,options,flags,says", [
    ("collapsed", dict(start_time="none"), ["--start-time", "none"],
     "--start-time is an option of --pprof, not of --collapsed"),
    ("speedscope", dict(per_thread=True), ["--per-thread"],
     "--per-thread is an option of --flamegraph, not of --speedscope"),
    ("heatmap", dict(source_root=["nothing"]), ["--source-root", "nothing"],
     "--source-root: 'nothing': expected OLD=NEW (two non-empty paths)"),
    ("pprof", dict(start_time="soon"), ["--start-time", "soon"],
     "--start-time: 'soon': expected an RFC 3339 time"),
])
def test_a_refused_format_option_says_the_same_as_the_cli(tmp_path, format, options, flags, says):
    """export() and convert() apply the formats' options through the exporter registry,
    as `tach export` does: the same refusals, the same messages."""
    path = GOLDEN / "threads_mixed.bin"
    code, _, err = cli("export", f"--{format}", *flags, "-o", tmp_path / "out", path, check=False)
    assert code == 2 and says in err, err
    with pytest.raises(tach.TachError) as e:
        tach.open(path).export(format, **options)
    assert says in str(e.value)
    with pytest.raises(tach.TachError) as e:
        tach.convert([path], format, tmp_path / "dir", **options)
    assert says in str(e.value)


def test_export_returns_text_or_bytes_as_the_registry_says():
    p = tach.open(GOLDEN / "cpu_recursive.bin")
    for name, _, _, binary in tach._native.export_formats():
        if name == "parquet":
            continue  # a directory of tables: only to a path
        out = p.export(name)
        assert isinstance(out, bytes if binary else str), name
    with pytest.raises(TypeError, match="unknown filter colour: use threads, start, end, since, until, status, title, "):
        p.export("flamegraph", colour="red")


# ---------------------------------------------------------------- notebooks


def test_repr_html_and_flamegraph():
    p = tach.open(GOLDEN / "cpu_recursive.bin")
    fg = p.flamegraph()
    svg = fg._repr_svg_()
    assert "<svg" in svg and "</svg>" in svg
    assert svg == p.export("flamegraph")
    html = p._repr_html_()
    assert html.count("<table") == 1
    assert f"{len(p)} (thread-samples)" in html
    assert "<svg" in html and "<?xml" not in html
    # The hottest function of CPython's answer is in the graph.
    top = max(
        (line.rsplit(" ", 1) for line in golden_sibling(GOLDEN / "cpu_recursive.bin", ".collapsed.txt").decode().splitlines()),
        key=lambda kv: int(kv[1]),
    )[0].split(";")[-1]
    assert html.count(top.split(":")[0]) > 0
    filtered = p.flamegraph(start=0.0, end=0.1)._repr_svg_()
    assert filtered != svg


def _heatmap_files(page):
    """path -> status of each file embedded in a heatmap page."""
    start = page.index('<script id="heatmap-data" type="application/json">')
    start = page.index(">", start) + 1
    data = json.loads(page[start:page.index("</script>", start)])
    return {f["path"]: f["status"] for f in data["files"]}


def test_heatmap_equals_the_cli_and_shows_inline(tmp_path):
    # A real recording (CPython's sampler in the chroot) of a script in this repository,
    # recorded under /work/wt/heatmap: source_root maps it to this checkout.
    data = ROOT / "tests" / "data" / "heatmap" / "stdlib_workload.bin"
    p = tach.open(data)
    hm = p.heatmap(source_root={"/work/wt/heatmap": str(ROOT)})
    _, out, _ = cli("export", "--heatmap", "-o", "-", "--source-root",
                    f"/work/wt/heatmap={ROOT}", data)
    assert hm.html == out
    script = "/work/wt/heatmap/tests/data/heatmap/stdlib_workload.py"
    assert _heatmap_files(hm.html)[script] == "ok"
    # Pairs work as a mapping does; mapped where the source is not, the page says so.
    assert p.heatmap(source_root=[("/work/wt/heatmap", str(ROOT))]).html == hm.html
    nowhere = p.heatmap(source_root={"/work/wt/heatmap": str(tmp_path / "nowhere")})
    assert _heatmap_files(nowhere.html)[script] == "missing"
    # Inline: a sandboxed iframe holding the whole page.
    import html as _html
    r = hm._repr_html_()
    assert r.startswith('<iframe srcdoc="') and 'sandbox="allow-scripts"' in r
    assert _html.unescape(r[len('<iframe srcdoc="'):r.index('" sandbox=')]) == hm.html
    hm.save(tmp_path / "h.html")
    assert (tmp_path / "h.html").read_text(encoding="utf-8") == hm.html
    with pytest.raises(TypeError, match="unknown filter"):
        p.heatmap(sources="x")


# ---------------------------------------------------------------- errors


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.bin"):
        tach.open(tmp_path / "nope.bin")


def test_bad_file_raises_tach_error_with_the_cli_message(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes((GOLDEN / "cpu_recursive.bin").read_bytes()[:100])
    with pytest.raises(tach.TachError) as e:
        tach.open(bad)
    assert isinstance(e.value, ValueError)
    code, _, err = cli("info", bad, check=False)
    assert code == 1
    assert err.strip() == f"tach: {e.value}"


def test_bad_sql_raises_tach_error():
    p = tach.open(GOLDEN / "cpu_recursive.bin")
    with pytest.raises(tach.TachError, match="unknown table nope"):
        p.query("select * from nope")
    with pytest.raises(tach.TachError):
        p.query("drop table samples")


# ---------------------------------------------------------------- convert


def test_convert_reports_each_file(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    names = ["cpu_recursive", "threads_mixed", "synthetic_rle"]
    for n in names:
        shutil.copy(GOLDEN / f"{n}.bin", src / f"{n}.bin")
    (src / "broken.bin").write_bytes(b"not a tach file at all")
    results = tach.convert(src, "collapsed", tmp_path / "out", workers=2)
    assert sorted(Path(r.input).name for r in results) == sorted(["broken.bin"] + [f"{n}.bin" for n in names])
    bad = [r for r in results if not r.ok]
    assert [Path(r.input).name for r in bad] == ["broken.bin"]
    _, _, cli_err = cli("info", src / "broken.bin", check=False)
    assert cli_err.strip() == f"tach: {bad[0].error}"
    for r in results:
        if r.ok:
            stem = Path(r.input).stem
            assert Path(r.output).read_bytes() == golden_sibling(GOLDEN / f"{stem}.bin", ".collapsed.txt")
    assert not (tmp_path / "out" / "broken.collapsed.txt").exists()


@pytest.fixture
def python_sigint():
    """Python's own Ctrl-C handler for the test. A process started in the background
    by a non-interactive shell (`cmd &`) inherits SIGINT ignored, and Python then
    installs no handler: no KeyboardInterrupt could ever be raised, whatever tach does."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_convert_releases_the_gil_and_stops_on_ctrl_c(tmp_path, python_sigint):
    big = GOLDEN / "stdlib_tests_large.bin"
    inputs = []
    for i in range(40):
        dst = tmp_path / f"run{i}.bin"
        os.symlink(big, dst)
        inputs.append(dst)
    ticks = []
    stop = threading.Event()

    def ticker():
        # Runs only if convert() released the GIL.
        while not stop.wait(0.01):
            ticks.append(1)
        return

    def interrupt():
        while len(ticks) < 20:
            if stop.wait(0.01):
                return
        os.kill(os.getpid(), signal.SIGINT)

    threads = [threading.Thread(target=ticker), threading.Thread(target=interrupt)]
    for t in threads:
        t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            tach.convert(inputs, "gecko", tmp_path / "out", workers=1)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert len(ticks) >= 20
    done = list((tmp_path / "out").glob("*.json"))
    assert len(done) < len(inputs), "the conversion finished before the interrupt"


def test_reading_a_big_profile_can_be_interrupted(tmp_path, python_sigint):
    # A 3 M-sample profile made by the crate's repeat_profile example (built by
    # `cargo test --all-targets`, which scripts/test-all runs first).
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    gen = target / "debug" / "examples" / "repeat_profile"
    if not gen.exists():
        pytest.skip(f"SKIPPED: {gen} is not built (cargo build --example repeat_profile)")
    big = tmp_path / "big.tach"
    subprocess.run([str(gen), str(GOLDEN / "stdlib_tests_large.bin"), str(big), "3000000"],
                   check=True, capture_output=True)
    profile = tach.open(big)
    assert len(profile) == 3_000_000

    def interrupt():
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=interrupt)
    t.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            profile.samples()
    finally:
        t.join()
    # Interrupted promptly, not after the whole table was built.
    assert time.monotonic() - started < 5


# ---------------------------------------------------------------- Writer

# CPython's structseq types are tuple subclasses with these fields (3.15's
# _remote_debugging); namedtuples have the same shape.
InterpreterInfo = namedtuple("InterpreterInfo", "interpreter_id threads")
ThreadInfo = namedtuple("ThreadInfo", "thread_id status frame_info")
FrameInfo = namedtuple("FrameInfo", "filename location funcname opcode")
LocationInfo = namedtuple("LocationInfo", "lineno end_lineno col_offset end_col_offset")

SYNTHETIC = sorted(p for p in BINS if golden_sibling(p, ".expected.json") is not None)


def feed(expected, structseq):
    strings = expected["strings"]
    for s in expected["samples"]:
        interps = []
        for i in s["interpreters"]:
            threads = []
            for t in i["threads"]:
                frames = []
                for fn, func, loc, op in t["frames"]:
                    if structseq:
                        frames.append(FrameInfo(strings[fn], None if loc is None else LocationInfo(*loc), strings[func], op))
                    else:
                        frames.append((strings[fn], None if loc is None else tuple(loc), strings[func], op))
                threads.append(ThreadInfo(t["thread_id"], t["status"], frames) if structseq else (t["thread_id"], t["status"], frames))
            interps.append(InterpreterInfo(i["interpreter_id"], threads) if structseq else [i["interpreter_id"], threads])
        yield s["timestamp_us"], interps


def write_like(bin_path, out, compression, structseq):
    expected = json.loads(golden_sibling(bin_path, ".expected.json"))
    info = tach.open(bin_path).info
    version = tuple(int(x) for x in info.python_version.split("."))
    with tach.Writer(
        out,
        expected["interval"],
        compression=compression,
        mode=expected["mode"],
        capture_config=expected["capture_config"],
        start_time_us=info.start_time_us,
        python_version=version,
    ) as w:
        for ts, interps in feed(expected, structseq):
            w.write_sample(interps, ts)
        if expected["stats"]:
            w.set_stats(*expected["stats"])
        assert w.total_samples == expected["writer_total_samples"]
    return expected


@pytest.mark.parametrize("path", SYNTHETIC, ids=lambda p: p.stem)
@pytest.mark.parametrize("structseq", [True, False], ids=["structseq", "tuples"])
def test_writer_reproduces_cpythons_file(path, structseq, tmp_path):
    out = tmp_path / "out.bin"
    if tach.open(path).info.compression != "none":
        # zstd streams need not match byte for byte; the uncompressed content must:
        # compare with the CLI's rewrite of CPython's file to compression none.
        ref = tmp_path / "ref.bin"
        cli("rewrite", "--compression", "none", "-o", ref, path)
        write_like(path, out, "none", structseq)
        assert out.read_bytes() == ref.read_bytes()
        return
    write_like(path, out, "none", structseq)
    assert out.read_bytes() == path.read_bytes(), f"{path.name}: tach.Writer differs from CPython's writer"


def test_writer_zstd_reads_back(tmp_path):
    path = GOLDEN / "synthetic_deep_stacks.bin"
    out = tmp_path / "z.bin"
    write_like(path, out, "zstd", True)
    assert tach.open(out).info.compression == "zstd"
    assert tach.open(out).export("collapsed") == tach.open(path).export("collapsed")


def test_writer_errors(tmp_path):
    w = tach.Writer(tmp_path / "w.bin", 1000, compression="none")
    with pytest.raises(TypeError, match="FrameInfo.filename must be a str"):
        w.write_sample([(0, [(1, 0, [(None, None, "f", None)])])], 5)
    with pytest.raises(TypeError, match="ThreadInfo"):
        w.write_sample([(0, [(1,)])], 5)
    w.finalize()
    with pytest.raises(tach.TachError, match="finalized"):
        w.write_sample([], 6)
    with pytest.raises(ValueError, match="unknown compression"):
        tach.Writer(tmp_path / "x.bin", 1000, compression="lz4")
    with pytest.raises(FileNotFoundError):
        tach.Writer(tmp_path / "no" / "dir.bin", 1000)


# ---------------------------------------------------------------- the `tach` command


def test_entry_point_is_the_cli(tmp_path):
    code, out, _ = cli("--version")
    assert out.strip() == "tach 0.1.0"
    code, out, _ = cli("--help")
    for sub in ("info", "verify", "rewrite", "export", "query"):
        assert f"  {sub}" in out
    # CPython's answer, through the command.
    _, out, _ = cli("export", "--collapsed", "-o", "-", GOLDEN / "cpu_recursive.bin")
    assert out == golden_sibling(GOLDEN / "cpu_recursive.bin", ".collapsed.txt").decode()
    code, out, _ = cli("verify", *SOME)
    assert out.count(": ok (") == len(SOME)
    # Usage errors exit 2, like clap's; invalid files 1.
    assert cli("query", "select * from nope", SOME[0], check=False)[0] == 2
    assert cli("nosuchcommand", check=False)[0] == 2
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"TACH")
    assert cli("verify", bad, check=False)[0] == 1
    # python -c calling tach._cli.main with explicit argv returns the status.
    r = subprocess.run([sys.executable, "-c", "import sys, tach._cli as c; sys.exit(c.main(['tach', 'verify', '-q', sys.argv[1]]))", str(SOME[0])])
    assert r.returncode == 0


def test_entry_point_matches_the_rust_binary():
    rust = os.environ.get("TACH_BIN")
    if not rust:
        print("SKIPPED: TACH_BIN (the Rust tach binary) not set", file=sys.stderr)
        pytest.skip("TACH_BIN not set")
    for args in (["info", SOME[0]], ["export", "--speedscope", "-o", "-", SOME[0]], ["query", QUERIES[0], SOME[1]]):
        a = subprocess.run([rust, *map(str, args)], capture_output=True)
        b = subprocess.run([TACH, *map(str, args)], capture_output=True)
        assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)


def test_package_ships_stubs():
    pkg = Path(tach.__file__).parent
    assert (pkg / "py.typed").exists()
    assert (pkg / "_native.pyi").exists()
    assert {"open", "query", "convert", "Writer", "TachError"} <= set(tach.__all__)
    assert issubclass(tach.TachError, ValueError)


def test_tach_cell_magic_in_a_real_notebook():
    """`%%tach` records a cell in a real kernel (nbclient + ipykernel) and shows the
    profile with its flamegraph; `_` in the next cell is the opened profile."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(Path(__file__).parent / "notebooks" / "tach_magic.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    magic, after = nb.cells[3], nb.cells[4]
    html = "".join(o.get("data", {}).get("text/html", "") for o in magic.outputs)
    assert "<svg" in html and "fib" in html and "slow_sum" in html, magic.outputs
    stderr = "".join(o.get("text", "") for o in magic.outputs if o.get("name") == "stderr")
    assert "samples in" in stderr and "Hz achieved" in stderr, stderr
    out = "".join(o.get("text", "") for o in after.outputs)
    count, top = out.split(" ", 1)
    assert int(count) > 100, out
    assert "fib" in top, out

    def html_of(c):
        return "".join(o.get("data", {}).get("text/html", "") for o in c.outputs)

    # Profile.top(): a DataFrame, shown as a table, the hottest function in it.
    table = html_of(nb.cells[5])
    assert "<table" in table and "self_samples" in table and "fib" in table, nb.cells[5].outputs
    # Profile.heatmap(): the page in a sandboxed iframe, its data inside.
    page = html_of(nb.cells[6])
    assert page.startswith("<iframe srcdoc=") and "heatmap-data" in page and "fib" in page
    # tach.diff() of a recording against itself: a table where nothing changed.
    d = html_of(nb.cells[7])
    assert "no significant change" in d and "grew" not in d and "shrank" not in d, d[:2000]


# --- Profile.top() and tach.diff() (docs/diff.md) ---
DIFF = ROOT / "tests" / "data" / "diff"


def test_top_by_line_is_cpythons_pstats():
    import marshal

    want = marshal.loads(read_golden(GOLDEN / "cpu_recursive.pstats"))
    df = tach.open(GOLDEN / "cpu_recursive.bin").top(by="line")
    got = {
        (r["filename"], r["lineno"], r["funcname"]):
            (r["self_samples"], r["total_samples"], r["self_s"], r["total_s"])
        for r in df.iter_rows(named=True)
    }
    assert got == {k: tuple(v[:4]) for k, v in want.items() if len(k) == 3}
    top3 = tach.open(GOLDEN / "cpu_recursive.bin").top(sort="total", limit=3)
    assert top3.height == 3 and top3["total_s"].is_sorted(descending=True)
    with pytest.raises(ValueError):
        tach.open(GOLDEN / "cpu_recursive.bin").top(by="module")
    with pytest.raises(TypeError):
        tach.open(GOLDEN / "cpu_recursive.bin").top(per_thread=True)


def test_diff_flags_the_slowed_function_as_the_cli_does():
    base = [DIFF / "base_1khz.bin", DIFF / "base_1khz_b.bin"]
    new = [DIFF / "slow_1khz.bin", DIFF / "slow_1khz_b.bin"]
    df = tach.diff(base, new)
    assert df["funcname"][0] == "parse" and df["verdict"][0] == "grew"
    assert (df["verdict"][1:] == "no significant change").all()
    _, out, _ = cli("diff", "--format", "json", "--base", *base, "--new", *new)
    rows = json.loads(out)["rows"]
    assert df.to_dicts() == [{k: r.get(k) for k in df.columns} for r in rows]
    # One program at 1 kHz and 10 kHz: nothing changed.
    same = tach.diff(DIFF / "base_1khz.bin", DIFF / "base_10khz.bin")
    assert (same["verdict"] == "no significant change").all()
