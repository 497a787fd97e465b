"""DuckDB over tach's Parquet export: the two queries of benches/tach/query.rs, end to end
(process start, Parquet read, query). See docs/performance.md, section "query".

    python3 benches/duckdb_query.py top_self|top_inclusive DIR.parquet
"""

import sys

import duckdb

QUERIES = {
    "top_self": """select funcname, count(*) as samples
                   from read_parquet('{d}/samples.parquet')
                   group by funcname order by samples desc limit 10""",
    "top_inclusive": """select s.funcname, count(*) as samples
                        from read_parquet('{d}/samples.parquet') x
                        join (select distinct stack_id, funcname
                              from read_parquet('{d}/stacks.parquet')) s
                          on s.stack_id = x.stack_id
                        group by s.funcname order by samples desc limit 10""",
}

name, d = sys.argv[1], sys.argv[2]
for row in duckdb.sql(QUERIES[name].format(d=d)).fetchall():
    print(*row, sep="\t")
