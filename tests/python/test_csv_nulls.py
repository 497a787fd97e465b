"""`tach query --format csv` keeps NULL rows: a row whose only column is NULL would be a
blank line, which pandas' read_csv skips by default; tach writes `""` there, as Python's
csv module does, so pandas, DuckDB and the csv module all read every row back."""

import csv
import io
import json

import duckdb
import pandas
import pytest

from test_parquet import GOLDEN, tach

FILE = GOLDEN / "threads_mixed.bin"

# Every other row NULL, then the values DuckDB gives over the same column.
ONE_COLUMN = ("select case when sample % 2 = 0 then depth end as cpu_depth "
              "from samples order by sample limit 8")
TWO_COLUMNS = ("select sample, case when sample % 2 = 0 then depth end as cpu_depth "
               "from samples order by sample limit 8")


@pytest.fixture(scope="module")
def expected():
    rows = tach("query", "--format", "json", TWO_COLUMNS, FILE)
    return [r["cpu_depth"] for r in json.loads(rows)]


def test_a_null_only_row_is_not_a_blank_line():
    text = tach("query", "--format", "csv", ONE_COLUMN, FILE)
    lines = text.splitlines()
    assert lines[0] == "cpu_depth"
    assert len(lines) == 9
    assert "" not in lines[1:]
    assert lines[2] == '""'


@pytest.mark.parametrize("query", [ONE_COLUMN, TWO_COLUMNS])
def test_pandas_reads_every_null_row(tmp_path, expected, query):
    out = tmp_path / "r.csv"
    tach("query", "--format", "csv", "-o", out, query, FILE)
    frame = pandas.read_csv(out)
    got = [None if pandas.isna(v) else int(v) for v in frame["cpu_depth"]]
    assert got == expected
    assert got.count(None) == 4


@pytest.mark.parametrize("query", [ONE_COLUMN, TWO_COLUMNS])
def test_duckdb_reads_every_null_row(tmp_path, expected, query):
    out = tmp_path / "r.csv"
    tach("query", "--format", "csv", "-o", out, query, FILE)
    got = [r[0] for r in duckdb.sql(
        f"select cpu_depth from read_csv('{out}', header = true)").fetchall()]
    assert got == expected


def test_python_csv_reads_every_null_row(expected):
    text = tach("query", "--format", "csv", ONE_COLUMN, FILE)
    rows = list(csv.reader(io.StringIO(text)))[1:]
    assert [None if r[0] == "" else int(r[0]) for r in rows] == expected
