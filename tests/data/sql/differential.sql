-- Queries run by tests/python/test_sql_differential.py through `tach query` over golden
-- TACH files and through DuckDB over tach's own Parquet export of the same files.
-- Each query ends with ';'. A query after '-- shares and totals
with t as (select filename, count(*) as n from samples group by filename) select filename, n, round(n * 100.0 / sum(n) over (), 3) as pct from t order by n desc, filename limit 15;
with t as (select thread_id, count(*) as n from samples group by thread_id) select thread_id, n * 1.0 / (select count(*) from samples) as share from t order by share desc, thread_id;
select funcname, count(*) as n from samples where has_gil group by funcname order by n desc, funcname limit 10;
select funcname, count(*) as n from samples where not has_gil group by funcname order by n desc, funcname limit 10;
select count(*) as n, sum(case when has_gil then 1 else 0 end) as gil, sum(case when main_thread then 1 else 0 end) as main from samples;
select status, count(*) as n from samples group by status order by status;
select has_gil, on_cpu, count(*) as n from samples group by has_gil, on_cpu order by has_gil, on_cpu;
select main_thread, count(*) as n, min(time_s) as first_s from samples group by main_thread order by main_thread;
select depth, count(*) as n from samples group by depth order by depth;
select max(depth) as deepest, min(depth) as shallowest, avg(depth) as mean_depth from samples;
select count(distinct stack_id) as stacks, count(distinct thread_id) as threads, count(distinct funcname) as leaves from samples;
select count(distinct filename) as files from samples;
-- time buckets
select floor(time_s) as sec, count(*) as n from samples group by sec order by sec;
select floor(time_s * 10) / 10 as t, count(*) as n from samples group by t order by t limit 40;
select floor(time_s) as sec, thread_id, count(*) as n from samples group by sec, thread_id order by sec, thread_id limit 50;
select floor(time_s) as sec, count(*) filter (where has_gil) as gil, count(*) as n from samples group by sec order by sec;
select floor(time_s) as sec, sum(case when has_gil then 1 else 0 end) * 1.0 / count(*) as gil_share from samples group by sec order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, n, sum(n) over (order by sec) as running from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select max(n) as busiest, min(n) as quietest from b;
-- per-thread comparisons
select thread_id, count(*) as n, count(distinct funcname) as functions from samples group by thread_id order by n desc, thread_id;
select thread_id, max(time_s) - min(time_s) as span_s from samples group by thread_id order by thread_id;
select thread_id, avg(depth) as mean_depth, max(depth) as max_depth from samples group by thread_id order by thread_id;
select thread_id, count(*) filter (where has_gil) * 1.0 / count(*) as gil_share from samples group by thread_id order by thread_id;
select thread_id, count(*) filter (where not has_gil and not main_thread) as waiting from samples group by thread_id order by thread_id;
with t as (select thread_id, funcname, count(*) as n from samples group by thread_id, funcname) select thread_id, funcname, n from t where n >= 50 order by thread_id, n desc, funcname;
with t as (select thread_id, funcname, count(*) as n from samples group by thread_id, funcname), r as (select thread_id, funcname, n, row_number() over (partition by thread_id order by -n, funcname) as k from t) select thread_id, funcname, n from r where k = 1 order by thread_id;
with t as (select thread_id, count(*) as n from samples group by thread_id) select thread_id, n, n - avg(n) over () as above_mean from t order by thread_id;
-- lines and files
select filename, lineno, count(*) as n from samples group by filename, lineno order by n desc, filename, lineno limit 15;
select funcname, count(distinct lineno) as lines from samples group by funcname order by lines desc, funcname limit 10;
select filename, funcname, min(lineno) as first_line, max(lineno) as last_line from samples group by filename, funcname order by filename, funcname limit 20;
select funcname, count(*) as n from samples where filename like '%.py' group by funcname order by n desc, funcname limit 10;
select funcname, count(*) as n from samples where funcname like '%test%' group by funcname order by n desc, funcname limit 10;
select lower(funcname) as f, count(*) as n from samples group by f order by n desc, f limit 10;
select length(funcname) as len, count(*) as n from samples group by len order by len limit 20;
select funcname, count(*) as n from samples where lineno between 1 and 100 group by funcname order by n desc, funcname limit 10;
-- subqueries
select funcname, count(*) as n from samples where thread_id = (select thread_id from (select thread_id, count(*) as c from samples group by thread_id) order by c desc, thread_id limit 1) group by funcname order by n desc, funcname limit 10;
select count(*) as n from samples where depth > (select avg(depth) from samples);
select funcname, count(*) as n from samples where funcname in (select funcname from samples where has_gil group by funcname) group by funcname order by n desc, funcname limit 10;
select count(*) as n from samples where stack_id in (select stack_id from stacks where funcname = 'main');
select count(*) as n from (select distinct stack_id, thread_id from samples);
select count(*) as n from (select thread_id from samples group by thread_id having count(*) > 100);
-- joins with stacks and frames
select s.funcname, count(*) as n from samples x join stacks s on s.stack_id = x.stack_id where s.position = 0 group by s.funcname order by n desc, s.funcname limit 10;
with f as (select distinct stack_id, funcname from stacks) select f.funcname, count(*) as n from samples x join f on f.stack_id = x.stack_id group by f.funcname order by n desc, f.funcname limit 15;
with f as (select distinct stack_id, filename from stacks) select f.filename, count(*) as n from samples x join f on f.stack_id = x.stack_id group by f.filename order by n desc, f.filename limit 10;
select x.funcname, f.lineno, count(*) as n from samples x join frames f on f.frame_id = x.frame_id group by x.funcname, f.lineno order by n desc, x.funcname, f.lineno limit 10;
select count(*) as frames, count(distinct funcname) as functions, count(distinct filename) as files from frames;
select max(position) + 1 as deepest from stacks;
select stack_id, count(*) as frames from stacks group by stack_id order by frames desc, stack_id limit 10;
with callers as (select a.funcname as callee, b.funcname as caller from stacks a join stacks b on a.stack_id = b.stack_id and b.position = a.position + 1 where a.position = 0) select callee, caller, count(*) as stacks from callers group by callee, caller order by stacks desc, callee, caller limit 10;
with leaf as (select stack_id, funcname from stacks where position = 0), parent as (select stack_id, funcname from stacks where position = 1) select l.funcname as leaf, p.funcname as parent, count(*) as n from samples x join leaf l on l.stack_id = x.stack_id join parent p on p.stack_id = x.stack_id group by l.funcname, p.funcname order by n desc, leaf, parent limit 10;
select f.filename, count(*) as n from frames f group by f.filename order by n desc, f.filename limit 10;
-- percentiles and distributions
select quantile_cont(depth, 0.5) as median_depth from samples;
select thread_id, quantile_cont(depth, 0.9) as p90 from samples group by thread_id order by thread_id;
select median(depth) as median_depth from samples;
select stddev(depth) as sd from samples;
select thread_id, stddev(time_s) as sd from samples group by thread_id having count(*) > 1 order by thread_id;
-- qualify-like filtering through a CTE
with t as (select funcname, count(*) as n from samples group by funcname), r as (select funcname, n, row_number() over (order by -n, funcname) as k from t) select funcname, n from r where k <= 5 order by k;
with t as (select filename, funcname, count(*) as n from samples group by filename, funcname), r as (select filename, funcname, n, row_number() over (partition by filename order by -n, funcname) as k from t) select filename, funcname, n from r where k = 1 order by n desc, filename limit 10;
-- misc
select count(*) as n from samples where time_s < 1.0;
select count(*) as n from samples where time_s >= 1.0 and time_s < 2.0 and has_gil;
select min(timestamp_us) as first_us, max(timestamp_us) as last_us from samples;
select max(timestamp_us) - min(timestamp_us) as span_us from samples;
select sample, funcname from samples order by sample limit 20;
select sample, thread_id, depth from samples where depth > 20 order by sample limit 20;
select coalesce(nullif(funcname, ''), '<empty>') as f, count(*) as n from samples group by f order by n desc, f limit 10;
select case when depth < 10 then 'shallow' when depth < 30 then 'mid' else 'deep' end as kind, count(*) as n from samples group by kind order by kind;
select funcname || ' @ ' || filename as label, count(*) as n from samples group by label order by n desc, label limit 10;
select distinct thread_id from samples order by thread_id;
select funcname, count(*) as n from samples group by funcname having count(*) between 10 and 100 order by n desc, funcname;
select cast(time_s as bigint) as sec, count(*) as n from samples group by sec order by sec;
(select funcname from samples where has_gil) union (select funcname from samples where main_thread) order by funcname limit 20;
select funcname, count(*) as n from samples group by funcname order by n desc, funcname limit 5 offset 5;

-- refused' must be refused by tach (exit 2)
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

-- more everyday questions
select funcname, count(*) as n from samples where main_thread group by funcname order by n desc, funcname limit 10;
select funcname, count(*) as n from samples where not main_thread group by funcname order by n desc, funcname limit 10;
select thread_id, funcname, count(*) as n from samples group by thread_id, funcname order by thread_id, n desc, funcname limit 30;
select funcname, count(*) as n, min(time_s) as first_s, max(time_s) as last_s from samples group by funcname order by n desc, funcname limit 10;
select funcname, count(distinct thread_id) as threads from samples group by funcname order by threads desc, funcname limit 10;
select funcname, count(*) as n from samples where time_s between 0.5 and 1.5 group by funcname order by n desc, funcname limit 10;
select count(*) filter (where depth > 10) as deep, count(*) filter (where depth <= 10) as shallow from samples;
select thread_id, count(*) as n from samples where funcname <> '<GC>' group by thread_id order by thread_id;
select funcname, count(*) as n from samples group by funcname having count(*) * 100.0 / (select count(*) from samples) > 5 order by n desc, funcname;
select funcname, count(*) * 100.0 / (select count(*) from samples) as pct from samples group by funcname order by pct desc, funcname limit 10;
with t as (select stack_id, count(*) as n from samples group by stack_id) select count(*) as stacks, max(n) as hottest, sum(n) as samples from t;
with f as (select distinct stack_id, funcname from stacks where funcname like '%worker%') select f.funcname, count(*) as n from samples x join f on f.stack_id = x.stack_id group by f.funcname order by n desc, f.funcname;
select abs(lineno) as l, count(*) as n from samples group by l order by n desc, l limit 10;
select round(time_s, 1) as t, count(*) as n from samples group by t order by t limit 20;
select (depth / 5) * 5 as bucket, count(*) as n from samples group by bucket order by bucket;

-- QUALIFY
select thread_id, funcname, count(*) as n from samples group by thread_id, funcname qualify row_number() over (partition by thread_id order by -n, funcname) = 1 order by thread_id;
select sample, thread_id from samples qualify row_number() over (partition by thread_id order by sample) = 1 order by thread_id;
select funcname, count(*) as n from samples group by funcname qualify row_number() over (order by -n, funcname) <= 3 order by n desc, funcname;

-- integer casts: a DOUBLE rounds to the nearest integer, ties to even (DuckDB); booleans and integers cast as they are
select sum(cast(has_gil as int)) as gil, sum(cast(main_thread as bigint)) as main from samples;
select cast(depth / 2 as int) as half, count(*) as n from samples group by half order by half;
select cast(time_s * 2 as int) as t, count(*) as n from samples group by t order by t;
select cast(-time_s as int) as t, count(*) as n from samples group by t order by t;
select cast(thread_id as bigint) as t, cast(lineno as int) as l, count(*) as n from samples group by t, l order by n desc, t, l limit 10;

-- refused: with t as
select funcname, count(*) * 100.0 / sum(count(*)) over () as pct from samples group by funcname order by pct desc limit 3;
-- refused: with t as
select thread_id, count(*) as n, sum(count(*)) over () as total from samples group by thread_id;
-- refused: ROWS BETWEEN
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, n, avg(n) over (order by sec rows between 1 preceding and 1 following) as smooth from b order by sec;
-- refused: subquery comparisons
select funcname from samples x where depth > (select avg(depth) from samples y where y.thread_id = x.thread_id) order by sample limit 5;
-- refused: unsupported function
with t as (select thread_id, count(*) as n from samples group by thread_id) select thread_id, rank() over (order by n) as r from t order by thread_id;
-- refused: ORDER BY count(*) sorts by an aggregate
select thread_id from samples group by thread_id order by count(*) desc, thread_id limit 1;
-- refused: unsupported function
select percentile_cont(0.5) within group (order by depth) as median_depth from samples;
