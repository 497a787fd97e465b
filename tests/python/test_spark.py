"""Spark reads tach's Parquet dataset (issue 18): PySpark from PyPI, in local mode, over
what `tach export --parquet --out-dir` wrote from four golden CPython 3.15.2
recordings, answers the questions of docs/parquet.md with the numbers `tach query`
gives over the TACH files themselves. DuckDB runs the same SQL text as Spark over the
same dataset, so the three columns of the docs are each checked.

Counts must be equal, shares within 1e-9. Without Java 17+ or PySpark the checks skip
LOUDLY (scripts/test-all installs PySpark from tests/python/requirements-spark.txt
when Java is there).

    .venv/bin/pip install -r tests/python/requirements-spark.txt
    .venv/bin/python -m pytest -q tests/python/test_spark.py

`python tests/python/test_spark.py DS FILE...`, over a dataset already written from
FILE..., checks that the three engines agree and prints Spark's answers.
"""

import decimal
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import GOLDEN, TACH, skip_loudly
# 5 threads with GIL waits; the same workload CPU-only; one recursive thread; 53
# threads and 15k samples.
FILES = ["threads_mixed.bin", "threads_mixed_cpu.bin", "cpu_recursive.bin",
         "stdlib_tests_large.bin"]
TABLES = ("samples", "stacks", "frames", "stack_counts")
SPARK_MAJOR = 4
JAVA_MIN = 17

# Each question: its `tach query` SQL over the TACH files, and the SQL that Spark and
# DuckDB run over the dataset (views `samples`, `stacks`, `frames`, `stack_counts` of
# the hive-partitioned tables; `source` is the partition column). The inclusive
# questions join samples with the distinct frames of each stack (the form that needs
# no stack_counts); `top_self_stack_counts` reads the dataset's stack_counts, which
# holds each stack's leaf frame. The dataset stores `origin_us` in place of `time_s`.
# tach's `file` column is compared as its file name without the extension, which is
# the dataset's `source`.
QUESTIONS = {
    "top_self_per_file": (
        """with t as (select file, funcname, filename, count(*) as n
                      from samples group by file, funcname, filename)
           select file, rk, funcname, filename, n
           from (select file, funcname, filename, n,
                        row_number() over (partition by file order by -n, funcname, filename) as rk
                 from t)
           where rk <= 10 order by file, rk""",
        """with t as (select source, funcname, filename, count(*) as n
                      from samples group by source, funcname, filename)
           select source, rk, funcname, filename, n
           from (select source, funcname, filename, n,
                        row_number() over (partition by source order by n desc, funcname, filename) as rk
                 from t)
           where rk <= 10 order by source, rk""",
    ),
    "top_self": (
        """select funcname, filename, count(*) as n from samples
           group by funcname, filename order by n desc, funcname, filename limit 10""",
        """select funcname, filename, count(*) as n from samples
           group by funcname, filename order by n desc, funcname, filename limit 10""",
    ),
    "top_self_stack_counts": (
        """select funcname, filename, count(*) as n from samples
           group by funcname, filename order by n desc, funcname, filename limit 10""",
        """select funcname, filename, sum(samples) as n from stack_counts
           group by funcname, filename order by n desc, funcname, filename limit 10""",
    ),
    "time_span_per_thread": (
        """select file, thread_id, min(time_s) as first_s, max(time_s) as last_s
           from samples group by file, thread_id order by file, thread_id""",
        """select source, thread_id, min((timestamp_us - origin_us) / 1e6) as first_s,
                  max((timestamp_us - origin_us) / 1e6) as last_s
           from samples group by source, thread_id order by source, thread_id""",
    ),
    "top_inclusive": (
        """select s.funcname, s.filename, sum(c.samples) as n
           from (select distinct file, stack_id, funcname, filename from stacks) s
           join stack_counts c on s.file = c.file and s.stack_id = c.stack_id
           group by s.funcname, s.filename order by n desc, s.funcname, s.filename limit 10""",
        """select s.funcname, s.filename, count(*) as n
           from samples x
           join (select distinct source, stack_id, funcname, filename from stacks) s
             on s.source = x.source and s.stack_id = x.stack_id
           group by s.funcname, s.filename order by n desc, s.funcname, s.filename limit 10""",
    ),
    "top_inclusive_per_file": (
        """with t as (select c.file, s.funcname, s.filename, sum(c.samples) as n
                      from (select distinct file, stack_id, funcname, filename from stacks) s
                      join stack_counts c on s.file = c.file and s.stack_id = c.stack_id
                      group by c.file, s.funcname, s.filename)
           select file, rk, funcname, filename, n
           from (select file, funcname, filename, n,
                        row_number() over (partition by file order by -n, funcname, filename) as rk
                 from t)
           where rk <= 10 order by file, rk""",
        """with t as (select x.source, s.funcname, s.filename, count(*) as n
                      from samples x
                      join (select distinct source, stack_id, funcname, filename from stacks) s
                        on s.source = x.source and s.stack_id = x.stack_id
                      group by x.source, s.funcname, s.filename)
           select source, rk, funcname, filename, n
           from (select source, funcname, filename, n,
                        row_number() over (partition by source order by n desc, funcname, filename) as rk
                 from t)
           where rk <= 10 order by source, rk""",
    ),
    "samples_per_thread": (
        """select file, thread_id, count(*) as n from samples
           group by file, thread_id order by file, thread_id""",
        """select source, thread_id, count(*) as n from samples
           group by source, thread_id order by source, thread_id""",
    ),
    "samples_per_file": (
        "select file, count(*) as n from samples group by file order by file",
        "select source, count(*) as n from samples group by source order by source",
    ),
    # avg over a DOUBLE: Spark averages a DECIMAL literal (`then 1.0 else 0.0`) as
    # DECIMAL(6,5), i.e. rounded to 5 digits (test_decimal_share_is_rounded_by_spark).
    "gil_wait_share_per_thread": (
        """select file, thread_id, avg(cast(gil_requested as double)) as gil_wait_share
           from samples group by file, thread_id order by file, thread_id""",
        """select source, thread_id, avg(cast(gil_requested as double)) as gil_wait_share
           from samples group by source, thread_id order by source, thread_id""",
    ),
}

# Ordered answers are compared row by row; the keys of the others (file or source)
# sort differently, so their rows are compared as sorted lists.
ORDERED = {"top_self", "top_self_stack_counts", "top_inclusive"}


def norm(value, key=None):
    """One answer cell as a plain Python value: Spark reads uint64 (thread_id) as
    DECIMAL(20,0), tach's `file` becomes the dataset's `source`."""
    if key == "file":
        return pathlib.PurePath(value).stem
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(a - b) <= 1e-9
    return type(a) is type(b) and a == b


def assert_same_rows(question, got, want):
    if question not in ORDERED:
        got, want = sorted(got), sorted(want)
    assert len(got) == len(want), (question, got[:3], want[:3])
    assert want, f"{question}: no rows"
    for g, w in zip(got, want):
        assert len(g) == len(w) and all(same(x, y) for x, y in zip(g, w)), (question, g, w)


def tach_rows(tach_bin, sql, files):
    run = subprocess.run([str(tach_bin), "query", "--format", "json", sql, *map(str, files)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return [tuple(norm(v, k) for k, v in row.items()) for row in json.loads(run.stdout)]


def spark_rows(spark, sql):
    return [tuple(norm(v) for v in row) for row in spark.sql(sql).collect()]


def duck_connect(dataset):
    import duckdb
    con = duckdb.connect()
    for t in TABLES:
        con.execute(f"create view {t} as select * from read_parquet("
                    f"'{dataset}/{t}/*/*.parquet', hive_partitioning = true)")
    return con


def duck_rows(con, sql):
    return [tuple(norm(v) for v in row) for row in con.execute(sql).fetchall()]


def java_problem():
    """Why Spark cannot run here, or None."""
    home = os.environ.get("JAVA_HOME")
    java = str(pathlib.Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not pathlib.Path(java).exists():
        return f"spark: no Java (Spark {SPARK_MAJOR} needs Java {JAVA_MIN}+; apt-get install openjdk-17-jre-headless)"
    out = subprocess.run([java, "-version"], capture_output=True, text=True)
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return f"spark: cannot tell the version of {java}: {out.stderr.strip()!r}"
    major = int(m[2]) if m[1] == "1" else int(m[1])
    if major < JAVA_MIN:
        return f"spark: {java} is Java {major}; Spark {SPARK_MAJOR} needs Java {JAVA_MIN}+"
    return None


LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
# the loggers that would print 'Setting default log level to "WARN"' at start
logger.sc.name = org.apache.spark.SparkContext
logger.sc.level = error
logger.gw.name = org.apache.spark.api.python.PythonGatewayServer
logger.gw.level = error
logger.ss.name = org.apache.spark.deploy.SparkSubmit
logger.ss.level = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def start_spark(scratch):
    """A small local session: 2 cores, 2 shuffle partitions, no UI, errors only."""
    from pyspark.sql import SparkSession
    log4j = pathlib.Path(scratch) / "log4j2.properties"
    log4j.write_text(LOG4J2)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (SparkSession.builder.master("local[2]").appName("tach-test-spark")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.driver.memory", "1g")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            # source=123 stays a string
            .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
            .config("spark.local.dir", str(scratch))
            .getOrCreate())


def register(spark, dataset):
    for t in TABLES:
        spark.read.parquet(str(pathlib.Path(dataset) / t)).createOrReplaceTempView(t)


# ---- the tests ----


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    why = java_problem()
    if why:
        skip_loudly(why + "; Spark checks not run")
    try:
        import pyspark
    except ImportError:
        skip_loudly("spark: PySpark is not installed (pip install -r "
                    "tests/python/requirements-spark.txt); Spark checks not run")
    assert int(pyspark.__version__.split(".")[0]) == SPARK_MAJOR, pyspark.__version__
    session = start_spark(tmp_path_factory.mktemp("spark"))
    yield session
    session.stop()


@pytest.fixture(scope="module")
def inputs():
    return [GOLDEN / f for f in FILES]


@pytest.fixture(scope="module")
def dataset(tach_bin, inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("spark-ds") / "ds"
    subprocess.run([str(tach_bin), "export", "--parquet", "--out-dir", str(out), *map(str, inputs)],
                   check=True, stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="module")
def registered(spark, dataset):
    register(spark, dataset)
    return spark


def test_spark_reads_the_hive_layout(registered, inputs):
    spark = registered
    for t in TABLES:
        assert "source" in spark.table(t).columns
    # The partition value is the input's name without its extension, and `file` the
    # path as given to the export.
    pairs = {(r.source, r.file) for r in spark.sql("select distinct source, file from samples").collect()}
    assert pairs == {(p.stem, str(p)) for p in inputs}
    types = dict(spark.table("samples").dtypes)
    assert types["thread_id"] == "decimal(20,0)"  # uint64
    assert types["stack_id"] == "bigint"  # uint32
    assert types["source"] == "string"


@pytest.mark.parametrize("question", list(QUESTIONS))
def test_spark_answers_as_tach_query(registered, tach_bin, inputs, question):
    tach_sql, spark_sql = QUESTIONS[question]
    want = tach_rows(tach_bin, tach_sql, inputs)
    assert_same_rows(question, spark_rows(registered, spark_sql), want)


@pytest.mark.parametrize("question", list(QUESTIONS))
def test_duckdb_runs_the_same_sql_as_spark(dataset, tach_bin, inputs, question):
    tach_sql, spark_sql = QUESTIONS[question]
    want = tach_rows(tach_bin, tach_sql, inputs)
    assert_same_rows(question, duck_rows(duck_connect(dataset), spark_sql), want)


def test_one_partition(registered, tach_bin, inputs):
    """`where source = ...` reads one recording, as `tach query` over that file alone."""
    sql = "select thread_id, count(*) as n from samples {} group by thread_id order by thread_id"
    got = spark_rows(registered, sql.format("where source = 'threads_mixed'"))
    assert got == tach_rows(tach_bin, sql.format(""), [inputs[0]])
    plan = registered.sql(sql.format("where source = 'threads_mixed'"))._jdf.queryExecution() \
        .executedPlan().toString()
    assert "PartitionFilters: [isnotnull(source" in plan, plan


def test_decimal_share_is_rounded_by_spark(registered):
    """Why the share queries cast to DOUBLE: Spark averages `case ... then 1.0 else 0.0`
    as DECIMAL(6,5), 5 digits (tach and DuckDB average it as a DOUBLE)."""
    sql = """select avg(case when gil_requested then 1.0 else 0.0 end) as d,
                    avg(cast(gil_requested as double)) as f
             from samples where source = 'stdlib_tests_large'"""
    row = registered.sql(sql).collect()[0]
    assert isinstance(row.d, decimal.Decimal) and row.d.as_tuple().exponent == -5
    assert abs(float(row.d) - row.f) > 1e-9


# ---- the numbers of docs/parquet.md ----


def main(dataset, files):
    import tempfile
    spark = start_spark(tempfile.mkdtemp(prefix="tach-spark-"))
    t = time.time()
    register(spark, dataset)
    con = duck_connect(dataset)
    for q, (tach_sql, spark_sql) in QUESTIONS.items():
        print(f"== {q}")
        want = tach_rows(TACH, tach_sql, files)
        got = spark_rows(spark, spark_sql)
        duck = duck_rows(con, spark_sql)
        assert_same_rows(q, got, want)
        assert_same_rows(q, duck, want)
        spark.sql(spark_sql).show(n=40, truncate=60)
    print(f"{time.time() - t:.1f} s of queries")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
