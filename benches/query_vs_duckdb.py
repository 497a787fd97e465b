"""`tach query` on a TACH file against DuckDB on tach's Parquet export of the same file:
the top-self and top-inclusive queries of docs/performance.md, whole process each,
alternately, with medians and paired ratios.

    python3 benches/query_vs_duckdb.py TACH_BIN FILE.tach FILE.parquet [RUNS]

DuckDB runs through benches/duckdb_query.py with this interpreter (needs `duckdb`,
tests/python/requirements.txt). FILE.parquet comes from `tach export --parquet`.
"""

import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

TOP_SELF = ("select funcname, count(*) as samples from samples "
            "group by funcname order by samples desc limit 10")
TOP_INCLUSIVE = ("select s.funcname, sum(c.samples) as samples "
                 "from (select distinct file, stack_id, funcname from stacks) s "
                 "join stack_counts c on s.file = c.file and s.stack_id = c.stack_id "
                 "group by s.funcname order by samples desc limit 10")


def timed(cmd):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    tach, tach_file, parquet = sys.argv[1:4]
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 7
    duck = os.path.join(os.path.dirname(os.path.abspath(__file__)), "duckdb_query.py")
    cmds = {
        "tach top-self": [tach, "query", TOP_SELF, tach_file],
        "duckdb top-self": [sys.executable, duck, "top_self", parquet],
        "tach top-inclusive": [tach, "query", TOP_INCLUSIVE, tach_file],
        "duckdb top-inclusive": [sys.executable, duck, "top_inclusive", parquet],
    }
    res = {k: [] for k in cmds}
    for _ in range(runs):
        for k, c in cmds.items():
            res[k].append(timed(c))
    for k, rows in res.items():
        walls = [w for w, _ in rows]
        cpus = [c for _, c in rows]
        print(f"{k:22} wall median {statistics.median(walls):.3f} s (min {min(walls):.3f})"
              f"  cpu median {statistics.median(cpus):.3f} s")
    for q in ("top-self", "top-inclusive"):
        ratios = [t[0] / d[0] for t, d in zip(res[f"tach {q}"], res[f"duckdb {q}"])]
        print(f"{q}: tach / DuckDB wall time, paired median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
