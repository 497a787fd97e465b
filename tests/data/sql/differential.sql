-- Queries run by tests/python/test_sql_differential.py through `tach query` over golden
-- TACH files and through DuckDB over tach's own Parquet export of the same files.
-- Each query ends with ';'. A query after '-- refused: TEXT' must be refused by tach (exit 2)
-- with one clean sentence holding TEXT; every other one must give DuckDB's answer.
-- Every query orders its rows completely, so rows compare in order.

-- shares and totals
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
select thread_id % 1000 as low, thread_id // 1000 as high, count(*) as n from samples group by low, high order by n desc, low, high;
with t as (select thread_id, count(*) as n from samples group by thread_id) select thread_id - (select min(thread_id) from t) as rel, n from t order by rel;
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

-- counts, names, lag

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

select funcname, count(*) * 100.0 / sum(count(*)) over () as pct from samples group by funcname order by pct desc, funcname limit 3;
select thread_id, count(*) as n, sum(count(*)) over () as total from samples group by thread_id order by thread_id;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, n, avg(n) over (order by sec rows between 1 preceding and 1 following) as smooth from b order by sec;
select funcname from samples x where depth > (select avg(depth) from samples y where y.thread_id = x.thread_id) order by sample limit 5;
with t as (select thread_id, count(*) as n from samples group by thread_id) select thread_id, rank() over (order by n) as r from t order by thread_id;
select thread_id from samples group by thread_id order by count(*) desc, thread_id limit 1;
select percentile_cont(0.5) within group (order by depth) as median_depth from samples;

-- arithmetic on unsigned columns: SQL's integers are signed, never wrapped
select min(depth) - max(depth) as d from samples;
select min(stack_id - 5) as m from samples;
select count(*) as n from samples where frame_id - 10 < 0;
select count(*) as n from samples where depth - 5 < 0;
select depth - 10 as rel, count(*) as n from samples group by rel order by rel;
select -depth as neg, count(*) as n from samples group by neg order by neg limit 10;
select 0 - count(*) as neg from samples;
select count(*) - count(distinct stack_id) as repeats, count(distinct stack_id) - count(*) as negative from samples;
select position - 1 as parent_position, count(*) as n from stacks group by parent_position order by parent_position limit 10;
select max(frame_id) - min(frame_id) as span, min(frame_id) - max(frame_id) as negative_span from frames;
select abs(depth - 20) as distance, count(*) as n from samples group by distance order by distance limit 15;
select count(*) filter (where stack_id - frame_id < 0) as below, count(*) filter (where stack_id - frame_id >= 0) as above from samples;
select depth * depth as squared, count(*) as n from samples group by squared order by squared limit 10;
select thread_id, sum(depth) as frames, max(depth) - avg(depth) as spread from samples group by thread_id order by thread_id;
select sum(depth) as frames, sum(depth) - count(*) * 10 as excess, sum(depth - 10) as excess_too from samples;
with d as (select distinct stack_id, depth from samples) select stack_id, depth - lag(depth) over (order by stack_id) as delta from d order by stack_id limit 30;
select stack_id, stack_id - lead(stack_id) over (order by stack_id) as gap from (select distinct stack_id from samples) order by stack_id limit 20;
select sum(timestamp_us) as total_us, sum(timestamp_us) - sum(timestamp_us) as zero from samples;
select min(timestamp_us - (select max(timestamp_us) from samples)) as before_end_us from samples;

-- division, modulo and rounding as SQL does them
select depth / 4 as quarter, count(*) as n from samples group by quarter order by quarter limit 10;
select depth // 4 as quarter, count(*) as n from samples group by quarter order by quarter;
select (depth - 20) // 3 as third, count(*) as n from samples group by third order by third;
select depth % 4 as rest, count(*) as n from samples group by rest order by rest;
select (depth - 20) % 3 as rest, count(*) as n from samples group by rest order by rest;
select count(*) / 3 as third, count(*) // 3 as whole_third, count(*) % 3 as rest from samples;
select round(avg(depth), 2) as mean_depth from samples;
select thread_id, round(avg(depth), 1) as mean, round(stddev(depth), 3) as sd from samples group by thread_id order by thread_id;
select round(time_s) as sec, count(*) as n from samples group by sec order by sec;
select round(time_s * 4) / 4 as quarter_s, count(*) as n from samples group by quarter_s order by quarter_s limit 20;
select round(-time_s, 1) as t, count(*) as n from samples group by t order by t limit 20;
select round(time_s, 2) as t, count(*) as n from samples group by t order by t limit 20;
select round(depth / 2) as half, count(*) as n from samples group by half order by half;
select round(-depth / 2) as neg_half, count(*) as n from samples group by neg_half order by neg_half;
select round(depth * 1.0 / 4, 1) as q, count(*) as n from samples group by q order by q;
select round(depth, -1) as tens, count(*) as n from samples group by tens order by tens;
select round(sum(depth) * 1.0 / count(*), 3) as mean from samples;
select funcname, round(count(*) * 100.0 / (select count(*) from samples), 2) as pct from samples group by funcname order by pct desc, funcname limit 10;
select thread_id, round(100.0 * count(*) filter (where has_gil) / count(*), 1) as gil_pct from samples group by thread_id order by thread_id;
select thread_id, count(*) filter (where has_gil) * 1.0 / nullif(count(*) filter (where on_cpu), 0) as ratio from samples group by thread_id order by thread_id;
select floor(depth / 10) * 10 as bucket, count(*) as n from samples group by bucket order by bucket;
select ceil(time_s) as up, count(*) as n from samples group by up order by up;
select cast(depth / 3 as bigint) as third, count(*) as n from samples group by third order by third;

-- shares and ranks over grouped rows (a window over an aggregate)
select funcname, count(*) * 100.0 / sum(count(*)) over () as pct from samples group by funcname order by pct desc, funcname limit 10;
select thread_id, count(*) as n, round(100.0 * count(*) / sum(count(*)) over (), 2) as pct from samples group by thread_id order by n desc, thread_id;
select funcname, count(*) as n, count(*) - avg(count(*)) over () as above_mean from samples group by funcname order by n desc, funcname limit 10;
select main_thread, count(*) as n, max(count(*)) over () as biggest from samples group by main_thread order by main_thread;
select floor(time_s) as sec, count(*) as n, sum(count(*)) over (order by floor(time_s)) as running from samples group by sec order by sec;
select filename, funcname, count(*) as n, count(*) * 100.0 / sum(count(*)) over (partition by filename) as pct_of_file from samples group by filename, funcname order by filename, n desc, funcname limit 30;
select filename, funcname, count(*) as n, rank() over (partition by filename order by count(*) desc) as r from samples group by filename, funcname order by filename, r, funcname limit 30;
select thread_id, funcname, count(*) as n, row_number() over (partition by thread_id order by count(*) desc, funcname) as k from samples group by thread_id, funcname order by thread_id, k limit 40;
select funcname, count(*) as n, dense_rank() over (order by count(*) desc) as r from samples group by funcname order by r, funcname limit 20;
select filename, count(*) as n, count(*) * 1.0 / sum(count(*)) over () as share, rank() over (order by count(*) desc) as r from samples group by filename order by r, filename limit 10;
select thread_id, count(*) as n from samples group by thread_id qualify rank() over (order by count(*) desc) = 1 order by thread_id;
select funcname, count(*) as n, lag(count(*)) over (order by count(*) desc, funcname) as previous from samples group by funcname order by n desc, funcname limit 10;

-- ORDER BY an aggregate that is not selected
select funcname from samples group by funcname order by count(*) desc, funcname limit 10;
select filename, funcname from samples group by filename, funcname order by count(*) desc, filename, funcname limit 10;
select funcname, min(time_s) as first_s from samples group by funcname order by max(time_s) - min(time_s) desc, funcname limit 10;
select thread_id, max(depth) as deepest from samples group by thread_id order by avg(depth) desc, thread_id;
select s.funcname from samples s group by s.funcname order by count(distinct s.thread_id) desc, count(*) desc, s.funcname limit 10;

-- rank, dense_rank and row_number with mixed directions
with t as (select funcname, count(*) as n from samples group by funcname) select funcname, n, rank() over (order by n desc) as r, dense_rank() over (order by n desc) as d from t order by r, funcname limit 20;
with t as (select thread_id, funcname, count(*) as n from samples group by thread_id, funcname), r as (select thread_id, funcname, n, rank() over (partition by thread_id order by n desc) as k from t) select thread_id, funcname, n from r where k <= 3 order by thread_id, n desc, funcname;
with t as (select funcname, count(*) as n from samples group by funcname) select funcname, n, row_number() over (order by n desc, funcname) as k from t order by k limit 10;
with t as (select funcname, filename, count(*) as n from samples group by funcname, filename), r as (select funcname, filename, n, row_number() over (partition by filename order by n desc, funcname asc) as k from t) select funcname, filename, n from r where k = 1 order by n desc, filename limit 10;
with t as (select funcname, count(*) as n from samples group by funcname) select funcname, n, row_number() over (order by funcname desc, n) as k from t order by k limit 10;
with t as (select thread_id, funcname, count(*) as n from samples group by thread_id, funcname) select thread_id, funcname, n, dense_rank() over (partition by thread_id order by n desc) as d from t order by thread_id, d, funcname limit 30;

-- EXISTS and NOT EXISTS
select count(*) as n from samples x where exists (select 1 from stacks s where s.stack_id = x.stack_id and s.funcname = 'main');
select funcname, count(*) as n from samples x where not exists (select 1 from stacks s where s.stack_id = x.stack_id and s.position > 0 and s.funcname like '%test%') group by funcname order by n desc, funcname limit 10;
select f.funcname, count(*) as n from frames f where exists (select 1 from samples s where s.frame_id = f.frame_id) group by f.funcname order by n desc, f.funcname limit 10;
select count(*) as never_a_leaf from frames f where not exists (select 1 from samples s where s.frame_id = f.frame_id);
select count(*) as n from samples where exists (select 1 from frames where funcname = 'main');
select count(*) as n from samples where not exists (select 1 from frames where funcname = 'no such function');
select thread_id, count(*) as n from samples x where exists (select * from stacks s where s.stack_id = x.stack_id and s.file = x.file and s.position = 1) and has_gil group by thread_id order by thread_id;

-- self and inclusive time, joins of samples, stacks and frames
with incl as (select distinct stack_id, funcname from stacks) select i.funcname, count(*) as inclusive, sum(case when x.funcname = i.funcname then 1 else 0 end) as self from samples x join incl i on i.stack_id = x.stack_id group by i.funcname order by inclusive desc, i.funcname limit 15;
with incl as (select distinct stack_id, funcname from stacks), tot as (select count(*) as n from samples) select i.funcname, round(100.0 * count(*) / (select n from tot), 2) as inclusive_pct from samples x join incl i on i.stack_id = x.stack_id group by i.funcname order by inclusive_pct desc, i.funcname limit 10;
select s.filename, count(distinct s.funcname) as functions from stacks s group by s.filename order by functions desc, s.filename limit 10;
select f.funcname, f.lineno, count(*) as n from samples x join frames f on f.frame_id = x.frame_id where f.lineno is not null group by f.funcname, f.lineno order by n desc, f.funcname, f.lineno limit 10;
select x.thread_id, s.funcname as parent, count(*) as n from samples x join stacks s on s.stack_id = x.stack_id where s.position = 1 group by x.thread_id, s.funcname order by n desc, x.thread_id, parent limit 10;
select f.funcname, count(x.sample) as n from frames f left join samples x on x.frame_id = f.frame_id group by f.funcname order by n desc, f.funcname limit 10;
select coalesce(f.opname, 'none') as op, count(*) as n from samples x left join frames f on f.frame_id = x.frame_id group by op order by n desc, op limit 10;
select s.stack_id, max(s.position) + 1 as frames, count(distinct s.funcname) as functions from stacks s group by s.stack_id order by frames desc, s.stack_id limit 10;
with leaf as (select stack_id, funcname from stacks where position = 0) select l.funcname, count(*) as n from samples x join leaf l on l.stack_id = x.stack_id group by l.funcname having count(*) > 5 order by n desc, l.funcname;

-- time windows
select funcname, count(*) as n from samples where time_s >= (select max(time_s) from samples) - 1.0 group by funcname order by n desc, funcname limit 10;
select case when time_s < 1 then 'first second' else 'later' end as phase, count(*) as n from samples group by phase order by phase;
select cast(floor(time_s * 2) as bigint) as half_s, count(distinct funcname) as functions from samples group by half_s order by half_s limit 20;
with b as (select floor(time_s * 10) as t, count(*) as n from samples group by t) select avg(n) as mean, max(n) as peak, min(n) as low from b;
select (timestamp_us - (select min(timestamp_us) from samples)) / 1000 as ms, funcname from samples order by sample limit 10;
select thread_id, min(timestamp_us) - (select min(timestamp_us) from samples) as start_us from samples group by thread_id order by thread_id;
select thread_id, (max(timestamp_us) - min(timestamp_us)) / 1000.0 as active_ms from samples group by thread_id order by active_ms desc, thread_id;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, n, n * 100.0 / max(n) over () as pct_of_peak from b order by sec;

-- CASE, LIKE, COALESCE and NULL
select case when filename like '%/lib/python%' then 'stdlib' when filename like '<%' then 'builtin' else 'user' end as origin, count(*) as n from samples group by origin order by n desc, origin;
select count(*) as n from samples where funcname ilike '%TEST%';
select count(*) filter (where lineno is null) as no_line, count(lineno) as with_line, count(*) as n from samples;
select coalesce(lineno, 0) as line, count(*) as n from samples group by line order by n desc, line limit 10;
select count(*) as no_opcode from frames where opcode is null;
select funcname, count(*) as n from samples where filename not like '%.py' group by funcname order by n desc, funcname limit 10;
select upper(substr(funcname, 1, 3)) as prefix, count(*) as n from samples group by prefix order by n desc, prefix limit 10;
select funcname, count(*) as n from samples where funcname in ('main', 'fib', 'run', '<module>', 'cpu_worker') group by funcname order by funcname;
select sum(case when has_exception then 1 else 0 end) as exc, avg(case when on_cpu then 1.0 else 0.0 end) as cpu_share from samples;
select length(filename) - length(replace(filename, '/', '')) as slashes, count(*) as n from samples group by slashes order by slashes;
select case when depth > 50 then 'deep' end as kind, count(*) as n from samples group by kind order by kind nulls last;
select count(*) as n, count(nullif(lineno, 1)) as not_line_one, sum(coalesce(lineno, 0)) as line_sum from samples;
select max(lineno) as last_line, min(coalesce(lineno, -1)) as first_or_none from frames;
select funcname, count(*) as n from samples where funcname like 'cpu%' or funcname like '%work%' group by funcname order by n desc, funcname;

-- HAVING
select funcname, count(*) as n from samples group by funcname having count(*) > 50 and count(distinct thread_id) >= 1 order by n desc, funcname;
select filename from samples group by filename having max(depth) > 30 order by filename;
select thread_id, count(*) as n from samples group by thread_id having sum(case when has_gil then 1 else 0 end) * 2 > count(*) order by thread_id;
select funcname, avg(depth) as d from samples group by funcname having avg(depth) > (select avg(depth) from samples) order by d desc, funcname limit 10;
select filename, count(*) as n from samples group by filename having count(*) * 100.0 / (select count(*) from samples) >= 1 order by n desc, filename;

-- several CTEs, set operations, distinct
with per_thread as (select thread_id, count(*) as n from samples group by thread_id), stats as (select avg(n) as mean from per_thread) select p.thread_id, p.n, p.n - s.mean as diff from per_thread p cross join stats s order by p.thread_id;
with a as (select funcname from samples where has_gil), b as (select funcname from samples where not has_gil) select count(distinct funcname) as both_ways from a where funcname in (select funcname from b);
select funcname from samples where has_gil except select funcname from samples where main_thread order by funcname limit 20;
select funcname from samples where has_gil intersect select funcname from samples where depth > 5 order by funcname limit 20;
select count(*) as n from (select funcname from samples union all select funcname from frames);
select count(distinct funcname || ':' || coalesce(cast(lineno as varchar), '?')) as lines from samples;

-- grouping sets: ROLLUP, CUBE and GROUPING SETS, subtotals with NULL for the keys left out
select thread_id, has_gil, count(*) as n from samples group by rollup (thread_id, has_gil) order by thread_id, has_gil;
select has_gil, on_cpu, count(*) as n, avg(depth) as mean_depth from samples group by cube (has_gil, on_cpu) order by has_gil, on_cpu;
select status, main_thread, count(*) as n from samples group by grouping sets ((status, main_thread), (status), ()) order by status, main_thread;
select has_gil, on_cpu, count(*) as n from samples group by has_gil, rollup (on_cpu) order by has_gil, on_cpu;
select has_gil, on_cpu, count(*) as n, grouping(has_gil, on_cpu) as level from samples group by rollup (has_gil, on_cpu) order by level, has_gil, on_cpu;
select filename, lineno, count(*) as n from samples where depth > 12 group by rollup (filename, lineno) order by filename, lineno, n limit 40;
-- mode: the commonest value, NULLs skipped, ties to the value seen first
select mode(lineno) as usual_line, mode(lineno) filter (where has_gil) as usual_gil_line from samples where depth > 3;
select has_gil, mode(filename) as f, count(*) as n from samples group by has_gil order by has_gil;
-- arg_max / arg_min / max_by / min_by: the value at the largest (smallest), ties to the first row
select thread_id, arg_max(funcname, depth) as deepest, arg_min(funcname, depth) as shallowest from samples group by thread_id order by thread_id;
select max_by(sample, time_s) as last_sample, min_by(lineno, depth) as top_line from samples;
select arg_max(lineno, depth) as l, arg_max(filename, lineno) as f from samples where not has_gil;
select floor(time_s) as sec, arg_max(funcname, depth) filter (where has_gil) as deepest_gil from samples group by sec order by sec limit 20;
-- nth_value: the n-th row of the frame
select sample, nth_value(funcname, 3) over (partition by thread_id order by sample) as third from samples order by sample limit 30;
select sample, nth_value(depth, 2) over (partition by thread_id order by sample rows between unbounded preceding and unbounded following) as d2 from samples order by sample limit 30;
select sample, nth_value(lineno, 1) over (order by sample rows between unbounded preceding and 1 following) as l from samples order by sample limit 30;
-- ROUND of an aggregate with a column for its places
select thread_id, round(avg(depth), cast(thread_id % 3 as integer)) as d from samples group by thread_id order by thread_id;
-- correlated scalar subqueries: a grouped join on the correlation
select sample, depth from samples x where depth = (select max(depth) from samples y where y.thread_id = x.thread_id) order by sample limit 20;
select count(*) as n from samples x where time_s < (select avg(time_s) from samples y where y.funcname = x.funcname and y.has_gil);
select sample, (select count(*) from stacks s where s.stack_id = x.stack_id and s.funcname = 'main') as mains from samples x order by sample limit 20;
select sample, (select min(lineno) from stacks s where s.stack_id = x.stack_id and s.lineno > 100000) as far from samples x order by sample limit 20;


-- refused, each with one sentence
-- refused: only as a condition of WHERE
select count(*) as n from samples x where has_gil or exists (select 1 from stacks s where s.stack_id = x.stack_id and s.funcname = 'main');
-- refused: only equalities
select count(*) as n from samples x where exists (select 1 from stacks s where s.stack_id > x.stack_id);
select funcname, ntile(4) over (order by funcname) as quartile from (select distinct funcname from samples) order by funcname;

-- the forms analysts reach for beyond the basics: each must give DuckDB's answer or one sentence
-- the variance family: sample and population, NULLs skipped, one value per group
select var_pop(depth) as vp, var_samp(depth) as vs, variance(depth) as v from samples;
select stddev_pop(depth) as sp, stddev_samp(depth) as ss, stddev(depth) as s from samples;
select thread_id, var_pop(depth) as vp, stddev_pop(depth) as sp from samples group by thread_id order by thread_id;
select thread_id, var_samp(time_s) as vs, stddev_samp(time_s) as ss from samples group by thread_id order by thread_id;
select funcname, count(*) as n, var_pop(depth) as vp, var_samp(depth) as vs from samples group by funcname order by n, funcname limit 15;
select var_pop(lineno) as vp, stddev_pop(lineno) as sp, var_samp(lineno) as vs from frames;
select filename, stddev_pop(lineno) as spread from frames group by filename order by filename limit 15;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select avg(n) as mean, stddev_pop(n) as sd_pop, stddev_samp(n) as sd from b;
select thread_id, round(stddev_pop(depth), 6) as sd from samples group by thread_id having count(*) > 1 order by thread_id;
select has_gil, var_pop(depth) as vp from samples group by has_gil order by has_gil;
select var_pop(depth) filter (where has_gil) as with_gil, var_pop(depth) filter (where not has_gil) as without from samples;
-- bool_or / bool_and
select thread_id, bool_or(has_gil) as ever_gil, bool_and(has_gil) as always_gil from samples group by thread_id order by thread_id;
select bool_or(on_cpu) as any_cpu, bool_and(on_cpu) as all_cpu, bool_or(gil_requested) as any_wait from samples;
select funcname, bool_and(main_thread) as main_only from samples group by funcname order by funcname limit 20;
select filename, bool_or(lineno > 100) as long_file, bool_and(lineno is null) as no_lines from frames group by filename order by filename limit 20;
select bool_or(lineno > 100000) as huge, bool_and(lineno > 0) as positive from frames;
select thread_id, count(*) as n from samples group by thread_id having bool_or(has_exception) or bool_and(has_gil) order by thread_id;
-- lag and lead with offsets and defaults
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, n, lag(n, 2, 0) over (order by sec) as two_before from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, n, lead(n, 1, -1) over (order by sec) as next_n from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, n - lag(n, 1, n) over (order by sec) as change from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, lag(n, 3) over (order by sec) as three_before, lead(n, 2) over (order by sec) as two_after from b order by sec;
select sample, thread_id, lag(depth, 1, 0) over (partition by thread_id order by sample) as prev_depth from samples order by sample limit 40;
select sample, lead(funcname, 1, 'end') over (partition by thread_id order by sample) as next_leaf from samples order by sample limit 40;
select sample, lag(funcname, 2, 'none') over (order by sample desc) as later from samples order by sample limit 30;
select sample, lag(lineno, 1, -1) over (order by sample) as prev_line from samples order by sample limit 40;
with t as (select thread_id, count(*) as n from samples group by thread_id) select thread_id, n, lead(n, 1, 0) over (order by thread_id) as next_thread_n from t order by thread_id;
-- moving averages, sums, counts, minima and maxima over frames of rows
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, n, avg(n) over (order by sec rows between 2 preceding and current row) as moving from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, sum(n) over (order by sec rows between 2 preceding and current row) as last3 from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, count(*) over (order by sec rows between 2 preceding and current row) as rows_in from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, min(n) over (order by sec rows between 2 preceding and current row) as lo, max(n) over (order by sec rows between 2 preceding and current row) as hi from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, avg(n) over (order by sec rows between 1 preceding and 1 following) as smooth from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, sum(n) over (order by sec rows between current row and 2 following) as next3 from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, sum(n) over (order by sec rows between 3 preceding and 1 preceding) as before3 from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, count(n) over (order by sec rows between 1 following and 3 following) as after3 from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, avg(n) over (order by sec rows 4 preceding) as m5 from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, sum(n) over (order by sec desc rows between 1 preceding and current row) as pair from b order by sec;
select sample, avg(depth) over (partition by thread_id order by sample rows between 4 preceding and current row) as smooth_depth from samples order by sample limit 50;
select sample, max(depth) over (partition by thread_id order by sample rows between 2 preceding and 2 following) as peak from samples order by sample limit 50;
select sample, sum(lineno) over (order by sample rows between 2 preceding and current row) as lines, count(lineno) over (order by sample rows between 2 preceding and current row) as with_line from samples order by sample limit 50;
select sample, avg(lineno) over (order by sample rows between 1 preceding and 1 following) as near_line from samples order by sample limit 50;
select sample, min(funcname) over (order by sample rows between 1 preceding and 1 following) as first_name from samples order by sample limit 30;
with t as (select thread_id, floor(time_s) as sec, count(*) as n from samples group by thread_id, sec) select thread_id, sec, avg(n) over (partition by thread_id order by sec rows between 2 preceding and current row) as moving from t order by thread_id, sec;
with t as (select thread_id, floor(time_s) as sec, count(*) as n from samples group by thread_id, sec) select thread_id, sec, sum(n) over (partition by thread_id order by sec rows between unbounded preceding and current row) as running from t order by thread_id, sec;
-- frames over the whole partition
select sample, last_value(funcname) over (order by sample rows between unbounded preceding and unbounded following) as last_leaf from samples order by sample limit 20;
select count(distinct lv) as values_seen from (select last_value(funcname) over (order by sample rows between unbounded preceding and unbounded following) as lv from samples);
select thread_id, lv from (select thread_id, last_value(funcname) over (partition by thread_id order by sample rows between unbounded preceding and unbounded following) as lv from samples) group by thread_id, lv order by thread_id;
select thread_id, fv from (select thread_id, first_value(funcname) over (partition by thread_id order by sample rows between unbounded preceding and unbounded following) as fv from samples) group by thread_id, fv order by thread_id;
select distinct thread_id, first_value(depth) over (partition by thread_id order by sample desc) as last_depth from samples order by thread_id;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, n, sum(n) over (order by sec rows between unbounded preceding and unbounded following) as total from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, avg(n) over (order by sec range between unbounded preceding and unbounded following) as mean from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, max(n) over (order by sec rows between unbounded preceding and unbounded following) as peak, min(n) over (order by sec rows between unbounded preceding and unbounded following) as low from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, n, last_value(n) over (order by sec rows between unbounded preceding and unbounded following) as final_n, first_value(n) over (order by sec rows between unbounded preceding and unbounded following) as first_n from b order by sec;
-- running frames written out
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, sum(n) over (order by sec rows between unbounded preceding and current row) as running from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, sum(n) over (order by sec range between unbounded preceding and current row) as running from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, avg(n) over (order by sec) as running_mean from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, avg(n) over (order by sec rows unbounded preceding) as running_mean from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, max(n) over (order by sec) as record, min(n) over (order by sec) as low from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, count(*) over (order by sec) as k, count(n) over (order by sec) as kn from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, first_value(n) over (order by sec) as opening, last_value(n) over (order by sec) as current_n from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, first_value(n) over (order by sec rows between unbounded preceding and current row) as opening from b order by sec;
select sample, avg(depth) over (partition by thread_id order by sample) as running_depth from samples order by sample limit 40;
-- first_value and last_value over frames of rows
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, first_value(n) over (order by sec rows between 2 preceding and current row) as f3, last_value(n) over (order by sec rows between 2 preceding and current row) as l3 from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, first_value(n) over (order by sec rows between 1 following and 2 following) as f, last_value(n) over (order by sec rows between 1 following and 2 following) as l from b order by sec;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, last_value(n) over (order by sec rows between current row and unbounded following) as final_n from b order by sec;
select sample, first_value(funcname) over (partition by thread_id order by sample rows between 3 preceding and 1 preceding) as earlier from samples order by sample limit 40;
-- ntile, percent_rank, cume_dist
with t as (select funcname, count(*) as n from samples group by funcname) select funcname, n, ntile(4) over (order by n desc, funcname) as quartile from t order by n desc, funcname;
with t as (select funcname, count(*) as n from samples group by funcname) select funcname, ntile(3) over (order by funcname) as tercile from t order by funcname;
with t as (select thread_id, count(*) as n from samples group by thread_id) select thread_id, ntile(10) over (order by thread_id) as decile from t order by thread_id;
select funcname, ntile(4) over (order by funcname) as quartile from (select distinct funcname from samples) order by funcname;
with t as (select funcname, count(*) as n from samples group by funcname) select funcname, n, percent_rank() over (order by n) as pr from t order by n, funcname;
with t as (select funcname, count(*) as n from samples group by funcname) select funcname, n, cume_dist() over (order by n) as cd from t order by n, funcname;
with t as (select funcname, count(*) as n from samples group by funcname) select funcname, percent_rank() over (order by n desc) as pr, cume_dist() over (order by n desc) as cd from t order by n desc, funcname;
with t as (select thread_id, funcname, count(*) as n from samples group by thread_id, funcname) select thread_id, funcname, cume_dist() over (partition by thread_id order by n) as cd, percent_rank() over (partition by thread_id order by n) as pr from t order by thread_id, n, funcname;
select depth, cume_dist() over (order by depth) as cd from (select distinct depth from samples) order by depth;
with t as (select thread_id, count(*) as n from samples group by thread_id) select thread_id, percent_rank() over (order by n) as pr from t order by thread_id;
-- percentiles within group
select percentile_cont(0.5) within group (order by depth) as median_depth from samples;
select percentile_cont(0.9) within group (order by depth) as p90, percentile_cont(0.1) within group (order by depth) as p10 from samples;
select thread_id, percentile_cont(0.5) within group (order by time_s) as mid_s from samples group by thread_id order by thread_id;
select percentile_disc(0.5) within group (order by depth) as median_depth from samples;
select percentile_disc(0.9) within group (order by depth) as p90, percentile_disc(0.25) within group (order by depth) as q1 from samples;
select thread_id, percentile_disc(0.75) within group (order by depth) as q3 from samples group by thread_id order by thread_id;
select percentile_cont(0.25) within group (order by depth desc) as q from samples;
select percentile_cont(0.5) within group (order by lineno) as mid_line from frames;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select percentile_cont(0.5) within group (order by n) as median_n, percentile_disc(0.5) within group (order by n) as median_disc from b;
-- ROUND with a column for its places
select depth, round(avg(time_s), cast(depth % 4 as integer)) as t from samples group by depth order by depth;
with t as (select thread_id, avg(depth) as d, cast(count(*) % 3 as integer) as k from samples group by thread_id) select thread_id, round(d, k) as r from t order by thread_id;
select round(time_s, cast(depth % 3 as int)) as t, count(*) as n from samples group by t order by t limit 20;
-- FILTER on window aggregates
select thread_id, count(*) filter (where has_gil) over (partition by thread_id) as gil_in_thread from samples group by thread_id, has_gil order by thread_id, gil_in_thread;
with b as (select floor(time_s) as sec, has_gil, count(*) as n from samples group by sec, has_gil) select sec, has_gil, sum(n) filter (where has_gil) over (partition by sec) as gil_n from b order by sec, has_gil;
with b as (select floor(time_s) as sec, has_gil, count(*) as n from samples group by sec, has_gil) select sec, has_gil, sum(n) filter (where has_gil) over (order by sec, has_gil) as running_gil from b order by sec, has_gil;
select sample, count(*) filter (where has_gil) over (order by sample rows between 4 preceding and current row) as recent_gil from samples order by sample limit 40;
-- covariance and correlation
select covar_pop(depth, time_s) as cp, covar_samp(depth, time_s) as cs, corr(depth, time_s) as r from samples;
select thread_id, corr(depth, time_s) as r, covar_pop(depth, sample) as c from samples group by thread_id having count(*) > 2 order by thread_id;
select covar_samp(lineno, frame_id) as c, corr(lineno, frame_id) as r from frames;
select has_gil, on_cpu, count(*) as n from samples group by rollup (has_gil, on_cpu) order by has_gil, on_cpu;
select has_gil, on_cpu, count(*) as n from samples group by grouping sets ((has_gil), (on_cpu), ()) order by has_gil, on_cpu;
select mode(funcname) as commonest from samples;
select arg_max(funcname, depth) as deepest_leaf from samples;
with b as (select floor(time_s) as sec, count(*) as n from samples group by sec) select sec, nth_value(n, 2) over (order by sec) as second from b order by sec;

-- every window function over the frame forms, per thread
select sample, row_number() over (partition by thread_id order by sample rows between 1 preceding and 1 following) as k from samples order by sample limit 30;
select sample, rank() over (partition by thread_id order by depth rows between unbounded preceding and unbounded following) as r from samples order by sample limit 30;
select sample, dense_rank() over (partition by thread_id order by depth) as r from samples order by sample limit 30;
select sample, count(*) over (partition by thread_id order by sample rows between 1 preceding and 1 following) as near from samples order by sample limit 40;
select sample, count(*) over (partition by thread_id order by sample rows between current row and unbounded following) as left_in_thread from samples order by sample limit 40;
select sample, sum(depth) over (partition by thread_id order by sample rows between current row and unbounded following) as depth_to_end from samples order by sample limit 40;
select sample, max(depth) over (partition by thread_id order by sample rows between current row and unbounded following) as deepest_after from samples order by sample limit 40;
select sample, min(depth) over (partition by thread_id order by sample rows between unbounded preceding and current row) as shallowest_so_far from samples order by sample limit 40;
select sample, sum(depth) over (partition by thread_id order by sample) as depth_so_far, count(*) over (partition by thread_id order by sample) as k from samples order by sample limit 40;
select sample, avg(depth) over (partition by thread_id) as thread_mean, count(*) over (partition by thread_id) as thread_n from samples order by sample limit 40;
select sample, avg(depth) over (partition by thread_id order by sample rows between unbounded preceding and unbounded following) as thread_mean from samples order by sample limit 40;
select sample, first_value(depth) over (partition by thread_id order by sample rows between 2 preceding and 2 following) as f, last_value(depth) over (partition by thread_id order by sample rows between 2 preceding and 2 following) as l from samples order by sample limit 40;
select sample, last_value(funcname) over (partition by thread_id order by sample rows between current row and 1 following) as next_or_self from samples order by sample limit 40;
select sample, first_value(funcname) over (partition by thread_id order by sample desc) as final_leaf from samples order by sample limit 40;
select sample, lag(depth, 1, 0) over (partition by thread_id order by sample) - depth as shrink, lead(depth, 2, -1) over (partition by thread_id order by sample) as later from samples order by sample limit 40;
select sample, ntile(5) over (partition by thread_id order by sample) as fifth from samples order by sample limit 60;
select sample, percent_rank() over (partition by thread_id order by sample) as pr, cume_dist() over (partition by thread_id order by sample) as cd from samples order by sample limit 40;
select depth, count(*) as n, cume_dist() over (order by depth) as cd, percent_rank() over (order by depth) as pr from samples group by depth order by depth;
-- aggregates with NULLs and ties
select count(lineno) as with_line, count(*) as all_rows, avg(lineno) as mean_line, sum(lineno) as line_sum from frames;
select min(lineno) as lo, max(lineno) as hi, stddev_samp(lineno) as sd from frames where lineno is null;
select var_samp(depth) as vs, var_pop(depth) as vp, stddev_samp(depth) as ss from samples where sample = 0;
select funcname, var_samp(depth) as vs from samples group by funcname having count(*) = 1 order by funcname limit 10;
select opname, count(*) as n, bool_or(lineno is null) as some_unlocated from frames group by opname order by n desc, opname limit 10;
select thread_id, percentile_cont(0.5) within group (order by depth) as med, median(depth) as med2 from samples group by thread_id order by thread_id;
select percentile_cont(0.5) within group (order by lineno) as med, percentile_disc(0.5) within group (order by lineno) as med_disc from frames where lineno is null;
with t as (select thread_id, count(*) as n from samples group by thread_id) select var_pop(n) as vp, stddev_pop(n) as sp, corr(n, thread_id % 7) as r from t;
-- ties in running windows: SQL's default frame takes the peers together
select floor(time_s) as sec, sample, sum(depth) over (order by floor(time_s), sample) as running from samples order by sample limit 40;
with d as (select depth, count(*) as n from samples group by depth) select depth, sum(n) over (order by depth) as at_most, sum(n) over (order by depth desc) as at_least from d order by depth;
-- refused: make the ORDER BY unique
select sample, sum(depth) over (order by floor(time_s)) as running from samples order by sample limit 40;
