"""Runs in its own process for tests/drivers/test_spark_jvm.py: a fresh ``local[2]`` session with
kstore's JVM source on ``spark.jars`` (a Python ``kstore`` source cannot share a session with it:
Spark refuses to register it, DATA_SOURCE_ALREADY_EXISTS). Writes one JSON object of results
to argv[2]; each check records its value or its error."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import traceback

import numpy as np
import pandas as pd

import kstore


def main(root: str, out_path: str) -> None:
    from pyspark.sql import SparkSession

    import kstore.spark as ks

    results: dict = {}

    def check(name, fn):
        try:
            results[name] = fn()
        except Exception:  # noqa: BLE001  (recorded for the test to report)
            results[name] = {"error": traceback.format_exc()[-3000:]}

    n = 2000
    pdf = pd.DataFrame({
        "day": [dt.date(2024, 1, 1) + dt.timedelta(days=int(i % 5)) for i in range(n)],
        "id": np.arange(n, dtype="int64"),
        "qty": np.arange(n) * 1.5,
        "name": [f"n{i % 7}" for i in range(n)],
    })
    url = "file://" + root
    kstore.store_dataset(url, "ds", pdf, partition_on=["day"], secondary_indices=["id"])
    spark = (ks.configure(SparkSession.builder.master("local[2]"))
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.adaptive.enabled", "false").config("spark.sql.warehouse.dir", root + "/warehouse")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from kstore.spark import jvm

    planner = jvm.install(spark)  # configure's getOrCreate installed it: the same planner comes back
    df = spark.read.format("kstore").option("dataset_uuid", "ds").load(root)

    def scan(q):
        rows = q.collect()
        leaves = q._jdf.queryExecution().executedPlan().collectLeaves()
        for i in range(leaves.size()):
            node = leaves.apply(i)
            if node.nodeName().endswith("Scan parquet") or "FileSourceScan" in node.getClass().getName():
                return rows, int(node.metrics().apply("numFiles").value()), node.toString()
        raise AssertionError("no file scan in " + q._jdf.queryExecution().executedPlan().toString())

    def rows_equal():
        got = sorted((str(r.day), r.id, r.qty, r.name) for r in df.collect())
        want = sorted((str(pd.Timestamp(r.day).date()), int(r.id), float(r.qty), r.name)
                      for r in kstore.read_dataset(url, "ds").itertuples())
        return {"equal": got == want, "n": len(got), "columns": df.columns}

    def select_one():
        _, _, text = scan(df.select("qty"))
        return {"scan": text}

    def planned(q, predicates):
        rows, files, text = scan(q)
        plan = kstore.plan_read(url, "ds", predicates=predicates)
        return {"rows": len(rows), "files_read": files, "planned": len(plan.tasks), "scan": text,
                "callback_planned": len(planner.last_plan.tasks)}

    check("rows_equal", rows_equal)
    check("select_one", select_one)
    check("partition_filter", lambda: planned(df.filter("day = DATE'2024-01-02'").select("qty"),
                                              [[("day", "==", dt.date(2024, 1, 2))]]))
    check("index_filter", lambda: planned(df.filter("id = 7"), [[("id", "==", 7)]]))
    check("index_in_or", lambda: planned(df.filter("id IN (7, 8) OR (id = 1000 AND day >= DATE'2024-01-01')"),
                                         [[("id", "in", [7, 8])], [("id", "==", 1000)]]))
    check("string_partition_expr", lambda: planned(df.filter("cast(day as string) LIKE '%-03'"), None))

    def writes():
        out = {}
        wdf = spark.createDataFrame([(dt.date(2024, 2, 1) + dt.timedelta(days=i % 3), i, float(i)) for i in range(30)],
                                    "day date, id long, v double")
        wdf.write.format("kstore").partitionBy("day").mode("overwrite").option("dataset_uuid", "w").save(root)
        meta = kstore.load_metadata(url, "w")
        out["partition_keys"] = list(meta.partition_keys)
        out["after_overwrite"] = len(kstore.read_dataset(url, "w"))
        more = spark.createDataFrame([(dt.date(2024, 2, 10), 100 + i, 1.0) for i in range(5)], "day date, id long, v double")
        more.write.format("kstore").partitionBy("day").mode("append").option("dataset_uuid", "w").save(root)
        out["after_append"] = len(kstore.read_dataset(url, "w"))
        spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
        one = spark.createDataFrame([(dt.date(2024, 2, 1), 999, 9.0)], "day date, id long, v double")
        one.write.format("kstore").partitionBy("day").mode("overwrite").option("dataset_uuid", "w").save(root)
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
        back = kstore.read_dataset(url, "w")
        out["after_dynamic"] = len(back)
        out["day1_ids"] = sorted(int(i) for i in back[pd.to_datetime(back["day"]) == pd.Timestamp("2024-02-01")]["id"])
        out["jvm_read_count"] = spark.read.format("kstore").option("dataset_uuid", "w").load(root).count()
        return out

    check("writes", writes)

    def python_register():
        name = ks.register(spark)
        plan = spark.read.format("kstore").option("dataset_uuid", "ds").load(root)._jdf.queryExecution().analyzed()
        leaf = plan.collectLeaves().apply(0)
        try:
            served = leaf.relation().location().getClass().getName()  # LogicalRelation(HadoopFsRelation)
        except Exception:  # noqa: BLE001  (another relation: a Python data source)
            served = plan.toString()
        via_read_dataset = ks.read_dataset(url, "ds", predicates=[[("id", "<", 10)]]).count()
        python = spark.read.format(name).load(root + "/ds").count()
        return {"register": name, "served_by": "jvm" if served == "io.kstore.spark.KstoreFileIndex" else served,
                "read_dataset": via_read_dataset, "python_source": python}

    check("python_register", python_register)

    def delta_idioms():
        out = {}
        path = root + "/events"
        days = [dt.date(2024, 3, 1) + dt.timedelta(days=i % 3) for i in range(12)]
        first = spark.createDataFrame([(d, i, f"e{i}") for i, d in enumerate(days)], "day date, id long, tag string")
        first.write.format("kstore").save(path)  # a bare save(): ErrorIfExists on a new dataset creates it
        out["bare_save"] = spark.read.format("kstore").load(path).count()
        try:
            first.write.format("kstore").save(path)
            out["second_bare_save"] = "no error"
        except Exception as exc:  # noqa: BLE001
            out["second_bare_save"] = str(exc)
        first.limit(1).write.format("kstore").mode("ignore").save(path)
        out["after_ignore"] = spark.read.format("kstore").load(path).count()
        try:  # a new partitioning needs overwriteSchema (Delta's rule)
            first.write.format("kstore").partitionBy("day").mode("overwrite").save(path)
            out["repartition_without_overwrite_schema"] = "no error"
        except Exception as exc:  # noqa: BLE001
            out["repartition_without_overwrite_schema"] = str(exc)
        first.write.format("kstore").partitionBy("day").option("overwriteSchema", "true").mode("overwrite").save(path)
        out["partition_keys"] = list(kstore.load_metadata(url, "events").partition_keys)
        v_overwrite = kstore.load_metadata(url, "events").version
        extra = spark.createDataFrame([(dt.date(2024, 3, 2), 100, "x")], "day date, id long, tag string")
        extra.write.format("kstore").mode("append").save(path)
        out["after_append"] = sorted(r.id for r in spark.read.format("kstore").load(path).collect())
        out["version_as_of"] = spark.read.format("kstore").option("versionAsOf", v_overwrite).load(path).count()
        out["version_as_of_want"] = len(kstore.read_dataset(url, "events", version=v_overwrite))
        ts = next(e.timestamp for e in kstore.history(url, "events") if e.version == v_overwrite)
        out["timestamp_as_of"] = spark.read.format("kstore").option("timestampAsOf", ts.isoformat()).load(path).count()
        repl = spark.createDataFrame([(dt.date(2024, 3, 1), 500, "r")], "day date, id long, tag string")
        (repl.write.format("kstore").mode("overwrite").option("replaceWhere", "day = DATE'2024-03-01'")
         .save(path))
        back = kstore.read_dataset(url, "events")
        out["after_replace_where"] = sorted(int(i) for i in back["id"])
        out["want_after_replace_where"] = sorted([i for i, d in enumerate(days) if d != dt.date(2024, 3, 1)]
                                                 + [100, 500])
        day2 = "day = DATE'2024-03-02'"
        out["sql_on_path"] = spark.sql(f"SELECT count(*) AS n FROM kstore.`{path}` WHERE {day2}").collect()[0].n
        out["sql_on_path_want"] = int((pd.to_datetime(back["day"]) == pd.Timestamp("2024-03-02")).sum())
        out["sql_version_as_of"] = spark.sql(f"SELECT count(*) AS n FROM kstore.`{path}` VERSION AS OF {v_overwrite}"
                                             ).collect()[0].n
        out["sql_timestamp_as_of"] = spark.sql(f"SELECT count(*) AS n FROM kstore.`{path}` TIMESTAMP AS OF "
                                               f"'{ts.isoformat()}'").collect()[0].n
        joined = spark.sql(f"SELECT a.id FROM kstore.`{path}` a JOIN kstore.`{path}` VERSION AS OF {v_overwrite} b "
                           f"ON a.id = b.id WHERE a.{day2}").collect()
        out["sql_join_versions"] = sorted(r.id for r in joined)
        out["sql_join_want"] = sorted(i for i, d in enumerate(days) if d == dt.date(2024, 3, 2))
        return out

    check("delta_idioms", delta_idioms)

    def refusals():
        out = {}
        for name, fn in {
            # Spark's Parquet scan reads whole files: kstore's row filtering of the option would be lost
            "predicates_option": lambda: spark.read.format("kstore").option("predicates", '[[["id", "==", 7]]]')
            .load(root + "/ds").count(),
            "no_dataset": lambda: spark.read.format("kstore").load("/").count(),
            "misspelt_option": lambda: spark.read.format("kstore").option("verison", "0").load(root + "/ds").count(),
            "partition_by_disagrees": lambda: spark.createDataFrame([(1, 2)], "a long, b long").write
            .format("kstore").partitionBy("a").option("partition_on", "b").save(root + "/bad"),
        }.items():
            try:
                fn()
                out[name] = "no error"
            except Exception as exc:  # noqa: BLE001
                out[name] = f"{type(exc).__name__}: {str(exc)[:1500]}"
        out["bad_written"] = os.path.exists(os.path.join(root, "bad"))
        return out

    check("refusals", refusals)

    def catalog_tables():
        out = {}
        path = root + "/events"  # written by delta_idioms

        def files():
            return sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)

        out["want"] = len(kstore.read_dataset(url, "events"))
        spark.sql(f"CREATE TABLE ev USING kstore LOCATION '{path}'")
        out["select"] = spark.sql("SELECT count(*) AS n FROM ev").collect()[0].n
        before = files()
        row = "SELECT DATE'2024-03-01', CAST(1 AS BIGINT), 'z'"
        for name, sql in (("insert", f"INSERT INTO ev {row}"), ("overwrite", f"INSERT OVERWRITE TABLE ev {row}")):
            try:  # Spark's file insert: raw Parquet beside kstore's files, or the dataset deleted first
                spark.sql(sql).collect()
                out[name] = "no error"
            except Exception as exc:  # noqa: BLE001
                out[name] = f"{type(exc).__name__}: {str(exc)[:400]}"
        out["files_unchanged"] = files() == before
        out["rows_after"] = len(kstore.read_dataset(url, "events"))
        df = spark.createDataFrame([(1, "a"), (2, "b")], "id long, s string")
        df.write.format("kstore").saveAsTable("managed")  # a table in the warehouse, written by kstore
        out["managed"] = spark.table("managed").count()
        df.write.format("kstore").mode("append").saveAsTable("managed")
        out["managed_after_append"] = spark.table("managed").count()
        out["managed_kstore_rows"] = len(kstore.read_dataset("file://" + root + "/warehouse", "managed"))
        return out

    check("catalog_tables", catalog_tables)

    def nan_rows():
        # Arrow's Parquet statistics leave NaN out of min/max; Spark orders NaN above every number
        import pyarrow as pa  # (pandas would turn NaN into a missing value)

        kstore.store_dataset(url, "nan", pa.table({"f": pa.array([float("nan"), 0.5, 0.25]), "i": [1, 2, 3]}))
        q = "f > 1.0"
        return {"jvm": sorted(r.i for r in spark.read.format("kstore").load(root + "/nan").filter(q).collect()),
                "parquet": sorted(r.i for r in spark.read.parquet(root + "/nan/table").filter(q).collect())}

    check("nan_rows", nan_rows)

    def widened():
        # int64 files in a double column (schema_mode="merge"): Spark's Parquet reader does not
        # convert them; format("kstore") reads the pinned version through the Python source
        import pyarrow as pa

        kstore.store_dataset(url, "wide", pa.table({"p": [1, 1, 2], "k": pa.array([1, 2**53, -5], pa.int64()),
                                                    "d": pa.array([dt.date(2024, 1, 1)] * 3, pa.date32())}),
                             partition_on="p")
        v = kstore.load_metadata(url, "wide").version
        kstore.update_dataset(url, "wide", pa.table({"p": [2], "k": [0.5], "d": pa.array([dt.datetime(2024, 1, 2, 3)],
                                                                                      pa.timestamp("us"))}),
                              schema_mode="merge")
        wide = spark.read.format("kstore").load(root + "/wide")
        before = spark.read.format("kstore").option("versionAsOf", v).load(root + "/wide")
        return {"rows": sorted((r.p, r.k, str(r.d)) for r in wide.collect()),
                "want": sorted((int(p), float(k), str(d)) for p, k, d in
                               kstore.read_table(url, "wide").to_pandas().itertuples(index=False, name=None)),
                "filtered": sorted(r.k for r in wide.filter("p = 2 AND k < 1").select("k").collect()),
                "count": wide.count(),
                "before_types": [f.dataType.simpleString() for f in before.schema.fields],
                "before_rows": sorted(r.k for r in before.collect()),
                # the change feed through the JVM source (read by the Python source)
                "feed": sorted((r._change_type, r._commit_version, r.k) for r in
                               spark.read.format("kstore").option("readChangeFeed", "true")
                               .option("startingVersion", 0).load(root + "/wide").collect()),
                "feed_want": sorted((t, int(v), float(k)) for t, v, k in zip(
                    *[kstore.read_changes(url, "wide", 0)[c] for c in ("_change_type", "_commit_version", "k")]))}

    check("widened", widened)

    def renamed():
        # a renamed column: the files hold it under its old name, which Spark's Parquet scan
        # would read as nulls; format("kstore") reads such a version through the Python source.
        # A dropped column only: the version reads natively (its files' extra column unread)
        import pandas as pd

        kstore.store_dataset(url, "ren", pd.DataFrame({"p": [1, 1, 2], "a": [10, 20, 30], "c": ["x", "y", "z"]}),
                             partition_on="p")
        kstore.drop_columns(url, "ren", "c")
        dropped = spark.read.format("kstore").load(root + "/ren")
        native = {"rows": sorted((r.p, r.a) for r in dropped.collect()), "columns": sorted(dropped.columns)}
        kstore.rename_columns(url, "ren", {"a": "amount"})
        kstore.update_dataset(url, "ren", pd.DataFrame({"p": [2], "amount": [40]}))
        ren = spark.read.format("kstore").load(root + "/ren")
        return {"native": native, "rows": sorted((r.p, r.amount) for r in ren.collect()),
                "columns": sorted(ren.columns),
                "filtered": sorted(r.amount for r in ren.filter("amount > 15").collect())}

    check("renamed", renamed)

    def stream_sink():
        # writeStream.format("kstore").partitionBy(...) on the JVM: one commit per micro-batch under
        # (query id, batch id); batch 1 run again (its record removed from the checkpoint, as after a
        # crash between kstore's commit and Spark's) commits nothing; complete mode replaces
        import pandas as pd

        src, ck = os.path.join(root, "stream-src"), os.path.join(root, "stream-ck")
        os.makedirs(src)

        def add(name, ids):
            pd.DataFrame({"id": ids, "day": [f"d{i % 2}" for i in ids]}).to_parquet(os.path.join(src, name + ".parquet"))

        def run():
            (spark.readStream.schema("id BIGINT, day STRING").parquet(src).writeStream.format("kstore")
             .partitionBy("day").option("checkpointLocation", ck).trigger(availableNow=True)
             .start(root + "/sunk").awaitTermination())

        add("a", list(range(10)))
        run()
        add("b", list(range(10, 16)))
        run()
        txns = [list(e.txn) for e in kstore.history(url, "sunk")]
        for name in ("1", ".1.crc"):
            if os.path.exists(os.path.join(ck, "commits", name)):
                os.remove(os.path.join(ck, "commits", name))
        run()
        (spark.readStream.schema("id BIGINT, day STRING").parquet(src).groupBy("day").count().writeStream
         .format("kstore").outputMode("complete").option("checkpointLocation", ck + "-counts")
         .trigger(availableNow=True).start(root + "/counts").awaitTermination())
        counts = kstore.read_dataset(url, "counts").sort_values("day")
        try:
            (spark.readStream.schema("id BIGINT, day STRING").parquet(src).groupBy("day").count().writeStream
             .format("kstore").outputMode("update").option("checkpointLocation", ck + "-update")
             .trigger(availableNow=True).start(root + "/updated").awaitTermination())
            update_mode = "accepted"
        except Exception as exc:  # noqa: BLE001
            update_mode = str(exc)[:300]
        return {"ids": sorted(int(i) for i in kstore.read_dataset(url, "sunk")["id"]), "txns": txns,
                "versions": len(kstore.history(url, "sunk")),
                "partition_keys": list(kstore.load_metadata(url, "sunk").partition_keys),
                "counts": [[d, int(c)] for d, c in zip(counts["day"], counts["count"])],
                "update_mode": update_mode, "updated_exists": os.path.exists(os.path.join(root, "updated"))}

    check("stream_sink", stream_sink)

    def stream_source():
        # readStream.format("kstore") on the JVM: every row first, then each new version's rows
        # (a compaction adds none); from startingVersion; a row delete stops it unless skipped
        import pandas as pd

        kstore.store_dataset(url, "sv", pd.DataFrame({"id": [1, 2], "day": ["a", "b"]}), partition_on="day")
        kstore.update_dataset(url, "sv", pd.DataFrame({"id": [3], "day": ["a"]}))

        def run(ck, **options):
            got = []
            reader = spark.readStream.format("kstore")
            for k, v in options.items():
                reader = reader.option(k, v)
            (reader.load(root + "/sv").writeStream
             .foreachBatch(lambda df, i: got.extend([i, r.id] for r in df.collect()))
             .option("checkpointLocation", os.path.join(root, ck)).trigger(availableNow=True).start()
             .awaitTermination())
            return got

        first = run("sv-ck")
        kstore.update_dataset(url, "sv", pd.DataFrame({"id": [4, 5], "day": ["b", "c"]}))
        kstore.compact(url, "sv")
        second = run("sv-ck")
        from_one = run("sv-ck1", startingVersion=1)
        limited = run("sv-lim", startingVersion=0, maxFilesPerTrigger=1)  # v0 (2 files), v1, v2 + compaction
        kstore.delete_rows(url, "sv", [[("id", "==", 1)]])
        kstore.update_dataset(url, "sv", pd.DataFrame({"id": [6], "day": ["a"]}))
        try:
            run("sv-ck")
            stopped = ""
        except Exception as exc:  # noqa: BLE001
            stopped = str(exc)
        skipped = run("sv-ck", skipChangeCommits="true")
        feed = run("sv-cdf", readChangeFeed="true", startingVersion=0)  # the change feed streams too
        return {"feed": sorted(r[1] for r in feed), "limited": sorted(r[1] for r in limited),
                "limited_batches": len({r[0] for r in limited}),
                "feed_expected": sorted(int(i) for i in kstore.read_changes(url, "sv", 0)["id"]),"first": sorted(r[1] for r in first), "second": sorted(r[1] for r in second),
                "batches_disjoint": not {r[0] for r in first} & {r[0] for r in second},
                "from_one": sorted(r[1] for r in from_one),
                "stopped": stopped[stopped.find("kstore.errors"):][:400] if "kstore.errors" in stopped else stopped[:400],
                "skipped": sorted(r[1] for r in skipped)}

    check("stream_source", stream_source)
    spark.stop()
    with open(out_path, "w") as fh:
        json.dump(results, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
