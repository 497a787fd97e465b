"""The Parquet export read by pyarrow and DuckDB: same counts as tach itself.

Run (after `cargo build`):
    python3 -m pytest tests/python/test_parquet.py -q
with pyarrow, duckdb and pytest installed (pip install pyarrow duckdb pytest).
TACH_BIN overrides the tach binary.
"""

import json
import subprocess

import duckdb
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from conftest import GOLDEN, built_tach

FILES = ["threads_mixed.bin", "cpu_recursive.bin", "stdlib_tests_large.bin"]


def tach(*args):
    out = subprocess.run([built_tach(), *map(str, args)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def query(sql, *files):
    return json.loads(tach("query", sql, *files, "--format", "json"))


def sample_count(path):
    return query("select count(*) as n from samples", path)[0]["n"]


TOP_SELF = """select funcname, count(*) as n from {samples} group by funcname
              order by n desc, funcname limit 10"""


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("single") / "one.parquet"
    tach("export", "--parquet", "-o", out, GOLDEN / FILES[0])
    return out


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("batch") / "ds"
    tach("export", "--parquet", "--out-dir", out, *[GOLDEN / f for f in FILES])
    return out


def test_single_file_tables_read_by_pyarrow(single):
    path = GOLDEN / FILES[0]
    samples = pq.read_table(single / "samples.parquet")
    assert samples.num_rows == sample_count(path)
    frames = pq.read_table(single / "frames.parquet")
    assert frames.num_rows == query("select count(*) as n from frames", path)[0]["n"]
    stacks = pq.read_table(single / "stacks.parquet")
    assert stacks.num_rows == query("select count(*) as n from stacks", path)[0]["n"]
    # time_s is not stored: origin_us (one value per file) takes its place.
    assert samples.schema.names[:4] == ["file", "sample", "timestamp_us", "origin_us"]
    counts = pq.read_table(single / "stack_counts.parquet")
    assert pc.sum(counts.column("samples")).as_py() == samples.num_rows


def test_time_s_from_origin_us_in_duckdb_equals_tach_query(single):
    """time_s is (timestamp_us - origin_us) / 1e6, as tach query computes it."""
    path = GOLDEN / FILES[0]
    sql = """select thread_id, min(time_s) as a, max(time_s) as b,
             count(distinct time_s) as c
             from {samples} group by thread_id order by thread_id"""
    con = duckdb.connect()
    got = con.execute(sql.format(samples=f"""(select thread_id,
        (timestamp_us - origin_us) / 1e6 as time_s
        from read_parquet('{single}/samples.parquet'))""")).fetchall()
    want = [(r["thread_id"], r["a"], r["b"], r["c"]) for r in query(sql.format(samples="samples"), path)]
    assert got == want


def test_single_file_counts_in_duckdb_equal_tach_query(single):
    path = GOLDEN / FILES[0]
    con = duckdb.connect()
    got = con.execute(
        TOP_SELF.format(samples=f"read_parquet('{single}/samples.parquet')")
    ).fetchall()
    want = [(r["funcname"], r["n"]) for r in query(TOP_SELF.format(samples="samples"), path)]
    assert got == want


def test_hive_dataset_reads_as_one_table(dataset):
    for f in FILES:
        assert (dataset / "samples" / f"source={f[:-4]}" / "part-0.parquet").exists()
    con = duckdb.connect()
    rows = con.execute(
        f"""select source, count(*) from read_parquet('{dataset}/samples/*/*.parquet',
            hive_partitioning = true) group by source order by source"""
    ).fetchall()
    assert rows == sorted((f[:-4], sample_count(GOLDEN / f)) for f in FILES)

    table = pads.dataset(dataset / "samples", format="parquet", partitioning="hive").to_table()
    assert table.num_rows == sum(sample_count(GOLDEN / f) for f in FILES)
    assert "source" in table.schema.names


def test_inclusive_counts_over_the_dataset_equal_tach_query(dataset):
    con = duckdb.connect()
    got = con.execute(
        f"""select s.funcname, count(*) as n
            from read_parquet('{dataset}/samples/*/*.parquet', hive_partitioning = true) x
            join (select distinct source, stack_id, funcname
                  from read_parquet('{dataset}/stacks/*/*.parquet', hive_partitioning = true)) s
              on s.source = x.source and s.stack_id = x.stack_id
            group by s.funcname order by n desc, s.funcname limit 10"""
    ).fetchall()
    want = query(
        """select s.funcname, sum(c.samples) as n
           from (select distinct file, stack_id, funcname from stacks) s
           join stack_counts c on s.file = c.file and s.stack_id = c.stack_id
           group by s.funcname order by n desc, s.funcname limit 10""",
        *[GOLDEN / f for f in FILES],
    )
    assert got == [(r["funcname"], r["n"]) for r in want]


def test_self_counts_from_stack_counts_equal_tach_query(dataset):
    """The dataset's stack_counts holds each stack's leaf frame: top self functions
    over every file are one scan of it, no join and no row per sample."""
    con = duckdb.connect()
    got = con.execute(
        f"""select funcname, sum(samples) as n
            from read_parquet('{dataset}/stack_counts/*/*.parquet', hive_partitioning = true)
            group by funcname order by n desc, funcname limit 10"""
    ).fetchall()
    want = query(TOP_SELF.format(samples="samples"), *[GOLDEN / f for f in FILES])
    assert got == [(r["funcname"], r["n"]) for r in want]
    table = pads.dataset(dataset / "stack_counts", format="parquet", partitioning="hive").to_table()
    assert pc.sum(table.column("samples")).as_py() == sum(sample_count(GOLDEN / f) for f in FILES)


def test_temporary_directories_are_not_read(tmp_path):
    """What an interrupted `--out-dir` run leaves (its hidden directory beside the
    tables' directories) is read by neither DuckDB, pyarrow nor tach query."""
    ds = tmp_path / "ds"
    tach("export", "--parquet", "--out-dir", ds, GOLDEN / FILES[1])
    part = ds / "samples" / f"source={FILES[1][:-4]}" / "part-0.parquet"
    leftover = ds / ".tach-ghost-123-0" / "samples" / "part-0.parquet"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(part.read_bytes())
    n = sample_count(GOLDEN / FILES[1])

    def duckdb_count():
        con = duckdb.connect()
        return con.execute(
            f"select count(*) from read_parquet('{ds}/samples/*/*.parquet', hive_partitioning = true)"
        ).fetchone()[0]

    def others():
        table = pads.dataset(ds / "samples", format="parquet", partitioning="hive").to_table()
        return table.num_rows, sample_count(ds)

    assert duckdb_count() == n
    assert others() == (n, n)
    # Inside a table's directory, hidden names are skipped by pyarrow and tach query
    # (and Spark), but DuckDB's `*` matches them: the export never writes there.
    hidden = ds / "samples" / ".source=ghost" / "part-0.parquet"
    hidden.parent.mkdir()
    hidden.write_bytes(part.read_bytes())
    assert others() == (n, n)
    with pytest.raises(duckdb.Error):
        duckdb_count()


def test_partitions_record_source_and_schema_version(tmp_path):
    ds = tmp_path / "ds"
    tach("export", "--parquet", "--out-dir", ds, GOLDEN / FILES[1])
    version = tach("query", "--schema").splitlines()[0].split()[-1]
    size = (GOLDEN / FILES[1]).stat().st_size
    for table in ["samples", "frames", "stacks", "stack_counts"]:
        part = ds / table / f"source={FILES[1][:-4]}" / "part-0.parquet"
        meta = pq.read_metadata(part)
        kv = {k.decode(): v.decode() for k, v in meta.metadata.items()}
        # The footer's `file` value is the one every row holds (tach query reads it from
        # there), as pyarrow reads the rows.
        assert set(pq.read_table(part, columns=["file"]).column("file").to_pylist()) == {kv["tach.file"]}
        assert kv["tach.schema_version"] == version
        assert kv["tach.source.name"] == FILES[1]
        assert kv["tach.source.size"] == str(size)
        assert len(kv["tach.source.xxh3"]) == 16


def test_tach_query_over_the_dataset_equals_over_the_files(dataset):
    sql = """select file, funcname, count(*) as n from samples
             group by file, funcname order by file, n desc, funcname"""
    assert query(sql, dataset) == query(sql, *[GOLDEN / f for f in FILES])
