"""One fleet question asked of a hive-partitioned tach dataset by DuckDB or Spark, end
to end (engine start, Parquet read, query), printed as tab-separated rows. The
fleet benchmark (benches/fleet.sh) times it against `tach query` over the TACH files.

    python3 benches/fleet_query.py duckdb|spark top_self|per_source|per_second DATASET_DIR

The same questions as benches/fleet.sh asks `tach query` (`file` there is `source` here:
the partition column names the recording).
"""

import os
import sys

QUERIES = {
    "top_self": """select funcname, count(*) as n from samples
                   group by funcname order by n desc, funcname limit 10""",
    "per_source": """select source, count(*) as n, avg(cast(has_gil as double)) as gil
                     from samples group by source order by n desc, source limit 10""",
    # A question only the samples answer: per second of the recordings, how many
    # samples one function had (`time_s` is stored as `timestamp_us - origin_us`).
    "per_second": """select cast(floor((timestamp_us - origin_us) / 1e6) as bigint) as sec,
                       count(*) as n
                     from samples where funcname = 'io_worker'
                     group by sec order by sec""",
}


def duckdb_rows(query, dataset):
    import duckdb

    con = duckdb.connect()
    con.execute("create view samples as select * from read_parquet("
                f"'{dataset}/samples/*/*.parquet', hive_partitioning = true)")
    return con.execute(query).fetchall()


def spark_rows(query, dataset):
    from pyspark.sql import SparkSession

    cores = str(os.cpu_count() or 2)
    spark = (SparkSession.builder.master(f"local[{cores}]").appName("tach-fleet-bench")
             .config("spark.sql.shuffle.partitions", cores)
             .config("spark.driver.memory", "2g")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.read.parquet(f"{dataset}/samples").createOrReplaceTempView("samples")
    rows = [tuple(r) for r in spark.sql(query).collect()]
    spark.stop()
    return rows


def main():
    engine, name, dataset = sys.argv[1:4]
    run = {"duckdb": duckdb_rows, "spark": spark_rows}[engine]
    for row in run(QUERIES[name], dataset):
        print(*row, sep="\t")


if __name__ == "__main__":
    main()
