-- Queries run by tests/python/test_sql_differential.py through `tach query` over golden
-- TACH files and through DuckDB over tach's own Parquet export of the same files.
-- Each query ends with ';'. A query after '-- refused' must be refused by tach (exit 2)
-- with a message that shows the rewrite; every other one must give DuckDB's answer.
-- Every query orders its rows completely, so rows compare in order.

select count(*) from samples;
select count(*) as n from samples where has_gil;
select min(time_s), max(time_s) from samples;
select funcname, count(*) as n from samples group by funcname order by n desc, funcname limit 10;
select funcname, count(*) from samples group by funcname order by count(*) desc, funcname limit 10;
select thread_id, count(*) as n, count(*) filter (where has_gil) as with_gil from samples group by thread_id order by n desc, thread_id;
select sec, n, n - lag(n) over (order by sec) as change from (select floor(time_s) as sec, count(*) as n from samples group by sec) order by sec;
with t as (select funcname, count(*) as n from samples group by funcname) select funcname, n * 100.0 / sum(n) over () as pct from t order by pct desc, funcname limit 10;
with t as (select thread_id, count(*) as n from samples group by thread_id) select thread_id, n, row_number() over (order by -n, thread_id) as r from t order by r;
select filename, count(*) as n, count(distinct funcname) as functions from samples group by filename order by n desc, filename limit 10;
select funcname, lineno, count(*) as n from samples where funcname <> '' group by funcname, lineno having count(*) >= 20 order by n desc, funcname, lineno;
select count(*) - count(*) filter (where has_gil) as without_gil from samples;
select thread_id, min(time_s) as first_s, max(time_s) as last_s, count(*) as n from samples group by thread_id order by thread_id;

-- refused
select funcname, count(*) * 100.0 / sum(count(*)) over () as pct from samples group by funcname order by pct desc limit 3;
-- refused
select thread_id, count(*) as n, sum(count(*)) over () as total from samples group by thread_id;
