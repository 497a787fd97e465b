"""SQL you can trust: every query of tests/data/sql/differential.sql gives, through
`tach query` over golden TACH files, DuckDB's answer over tach's own Parquet export of
the same files, or is refused before it runs with a message that names the construct
or shows the rewrite.

A silent difference fails. DuckDB (PyPI) is the reference. In tach's SQL every unsigned
column but thread_id (ids, depth, position) is a signed 64-bit integer, so that `min(depth) -
max(depth)` is negative; DuckDB reads the same columns through views that cast them to
BIGINT (over its UINTEGER columns DuckDB raises an overflow error instead).

The last test prints the figure docs/query.md records (answered, equal, refused,
wrong) after a full run:
    python3 -m pytest tests/python/test_sql_differential.py -q -s
"""

import csv
import decimal
import io
import json
import math
import pathlib
import subprocess

import duckdb
import pytest

from conftest import GOLDEN, REPO, built_tach
from test_parquet import tach

CORPUS = pathlib.Path(REPO) / "tests" / "data" / "sql" / "differential.sql"
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
    for table in ("samples", "stacks", "frames"):
        path = f"{directory}/{table}.parquet"
        columns = con.execute(f"describe select * from read_parquet('{path}')").fetchall()
        # Unsigned columns as BIGINT, as tach query has them (arithmetic never wraps),
        # but thread_id, which real recordings fill with all 64 bits.
        items = []
        for name, kind, *_ in columns:
            if name == "origin_us":
                # The export stores origin_us, one value per file, in place of time_s
                # (docs/parquet.md): the view puts time_s back where tach query has it.
                continue
            signed = kind.startswith("U") and name != "thread_id"
            items.append(f'cast("{name}" as bigint) as "{name}"' if signed else f'"{name}"')
            if name == "timestamp_us" and table == "samples":
                items.append("(timestamp_us - origin_us) / 1e6 as time_s")
        con.execute(f"create view {table} as select {', '.join(items)} from read_parquet('{path}')")
    return [tuple(r) for r in con.execute(sql).fetchall()]


def same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
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
    assert len(QUERIES) >= 350
    assert any(r for _, r in QUERIES) and not all(r for _, r in QUERIES)


# Per query, what happened on each file: "equal", "refused" or "wrong".
OUTCOMES = {}


def is_clean_refusal(stderr):
    """One message, no parser internals (`Query { with: None, ...`), no panic."""
    text = stderr.strip()
    return (text != "" and "panicked" not in text and "{ " not in text
            and "Some(" not in text and "None," not in text)


@pytest.mark.parametrize("index,sql,refused", [(i, s, r) for i, (s, r) in enumerate(QUERIES)],
                         ids=[f"q{i}" for i in range(len(QUERIES))])
@pytest.mark.parametrize("name", FILES)
def test_tach_query_gives_duckdbs_answer_or_refuses(parquet, name, index, sql, refused):
    outcome = OUTCOMES.setdefault(index, {})
    outcome[name] = "wrong"
    run = subprocess.run([built_tach(), "query", "--format", "json", sql, GOLDEN / name],
                         capture_output=True, text=True)
    if refused is not None:
        assert run.returncode == 2, run.stdout + run.stderr
        assert refused in run.stderr, run.stderr
        assert is_clean_refusal(run.stderr), run.stderr
        outcome[name] = "refused"
        return
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)
    got = [tuple(r.values()) for r in rows]
    want = duck(sql, parquet[name])
    assert len(got) == len(want), (sql, got[:3], want[:3])
    # JSON has no NaN: tach's JSON writes it as null. Where DuckDB gives NaN and the
    # JSON null, tach's CSV must say NaN there (and only there).
    nan_cells = [(i, j) for i, (g, w) in enumerate(zip(got, want)) for j, (x, y) in enumerate(zip(g, w))
                 if x is None and isinstance(y, float) and math.isnan(y)]
    if nan_cells:
        csv_run = subprocess.run([built_tach(), "query", "--format", "csv", sql, GOLDEN / name],
                                 capture_output=True, text=True)
        assert csv_run.returncode == 0, csv_run.stderr
        cells = list(csv.reader(io.StringIO(csv_run.stdout)))[1:]
        for i, j in nan_cells:
            assert cells[i][j] == "NaN", (sql, i, j, cells[i])
            got[i] = got[i][:j] + (float("nan"),) + got[i][j + 1:]
    for g, w in zip(got, want):
        assert len(g) == len(w) and all(same(x, y) for x, y in zip(g, w)), (sql, g, w)
    outcome[name] = "equal"


def test_zz_differential_figure():
    """The figure of the whole corpus (after the test above ran on every query):
    0 wrong and at least 99% answered."""
    complete = len(OUTCOMES) == len(QUERIES) and all(len(o) == len(FILES) for o in OUTCOMES.values())
    if not complete:
        pytest.skip("the figure needs the whole corpus run")
    wrong = sum(1 for o in OUTCOMES.values() if "wrong" in o.values())
    refused = sum(1 for o in OUTCOMES.values() if "refused" in o.values() and "wrong" not in o.values())
    equal = len(QUERIES) - wrong - refused
    print(f"\nSQL differential: {len(QUERIES)} queries x {len(FILES)} files: answered {equal} "
          f"({100.0 * equal / len(QUERIES):.1f}%), equal {equal}, refused {refused}, wrong {wrong}")
    assert wrong == 0
    assert equal >= 0.99 * len(QUERIES)


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
