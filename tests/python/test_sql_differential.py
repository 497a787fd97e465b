"""SQL you can trust: every query of tests/data/sql/differential.sql gives, through
`tach query` over golden TACH files, DuckDB's answer over tach's own Parquet export of
the same files, or is refused before it runs with a message that names the construct
or shows the rewrite.

A silent difference fails. DuckDB (PyPI) is the reference.
"""

import decimal
import json
import math
import pathlib
import subprocess

import duckdb
import pytest

from test_parquet import GOLDEN, ROOT, tach, tach_bin

CORPUS = ROOT / "tests" / "data" / "sql" / "differential.sql"
FILES = ["stdlib_tests_large.bin", "threads_mixed.bin", "cpu_recursive.bin"]


def corpus():
    """(query, refused) pairs: `refused` is the text the refusal must hold, for a query
    after a '-- refused: TEXT' line, else None."""
    out, refused, text = [], None, []
    for line in CORPUS.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("-- refused:"):
            refused = stripped.split(":", 1)[1].strip()
            continue
        if not stripped or stripped.startswith("--"):
            continue
        text.append(stripped)
        if stripped.endswith(";"):
            out.append((" ".join(text)[:-1], refused))
            text, refused = [], None
    assert not text, f"unterminated query in {CORPUS}: {text}"
    return out


QUERIES = corpus()


@pytest.fixture(scope="module")
def parquet(tmp_path_factory):
    out = {}
    for f in FILES:
        d = tmp_path_factory.mktemp(f[:-4])
        tach("export", "--parquet", "-o", d, GOLDEN / f)
        out[f] = d
    return out


def duck(sql, directory):
    con = duckdb.connect()
    for table in ("stacks", "frames"):
        con.execute(f"create view {table} as select * from read_parquet('{directory}/{table}.parquet')")
    # The export stores origin_us, one value per file, in place of time_s
    # (docs/parquet.md): the view puts time_s back where tach query has it.
    con.execute(
        f"""create view samples as select file, sample, timestamp_us,
                (timestamp_us - origin_us) / 1e6 as time_s,
                * exclude (file, sample, timestamp_us, origin_us)
            from read_parquet('{directory}/samples.parquet')"""
    )
    return [tuple(r) for r in con.execute(sql).fetchall()]


def same(a, b):
    if isinstance(a, decimal.Decimal):
        a = float(a)
    if isinstance(b, decimal.Decimal):
        b = float(b)
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def test_corpus_has_both_kinds():
    assert len(QUERIES) >= 100
    assert any(r for _, r in QUERIES) and not all(r for _, r in QUERIES)


@pytest.mark.parametrize("sql,refused", QUERIES, ids=[f"q{i}" for i in range(len(QUERIES))])
@pytest.mark.parametrize("name", FILES)
def test_tach_query_gives_duckdbs_answer_or_refuses(parquet, name, sql, refused):
    run = subprocess.run([tach_bin(), "query", "--format", "json", sql, GOLDEN / name],
                         capture_output=True, text=True)
    if refused is not None:
        assert run.returncode == 2, run.stdout + run.stderr
        assert refused in run.stderr, run.stderr
        return
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)
    got = [tuple(r.values()) for r in rows]
    want = duck(sql, parquet[name])
    assert len(got) == len(want), (sql, got[:3], want[:3])
    for g, w in zip(got, want):
        assert len(g) == len(w) and all(same(x, y) for x, y in zip(g, w)), (sql, g, w)


def test_count_columns_are_named_and_signed():
    rows = json.loads(tach("query", "--format", "json",
                           "select count(*), min(time_s), max(time_s) from samples",
                           GOLDEN / FILES[1]))
    assert list(rows[0]) == ["count_star()", "min(time_s)", "max(time_s)"]
    # Signed: a difference of counts goes below zero instead of wrapping.
    rows = json.loads(tach("query", "--format", "json",
                           "select count(*) filter (where has_gil) - count(*) as d from samples",
                           GOLDEN / FILES[1]))
    assert rows[0]["d"] < 0
