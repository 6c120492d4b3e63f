"""Delta / PySpark idioms on the ``kstore`` data source (issue #13), on a real local Spark.

What users coming from Delta or Spark's file sources write, and what kstore does with it:

* ``format("kstore")`` in a fresh session with no :func:`kstore.spark.register` call
  (``pyspark_kstore.DefaultSource``, discovered by PySpark);
* ``.partitionBy(...)``, a bare ``.save()`` and ``mode("ignore")``, which Spark 4.3
  refuses for every Python data source before kstore runs, and the kstore idioms for them;
* ``mergeSchema``, ``partitionOverwriteMode=dynamic`` and ``replaceWhere`` write options;
* column pruning (which Spark does not offer Python data sources: bytes read measured
  with a counting store) and what ``explain()`` shows.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

import kstore
from kstore.errors import DatasetExistsError, InvalidArgumentError, SchemaMismatchError
from kstore.io.local import LocalStore

pyspark = pytest.importorskip("pyspark")

from pyspark import cloudpickle  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader  # noqa: E402

import kstore.spark as ks  # noqa: E402

pytestmark = [
    pytest.mark.spark,
    pytest.mark.xdist_group("spark"),
    pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning", "ignore::UserWarning"),
]

cloudpickle.register_pickle_by_value(sys.modules[__name__])

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path) -> str:
    root = tmp_path / "store"
    root.mkdir()
    return str(root)


def frame(spark, rows):
    """``rows``: (id, day) pairs; loc = id % 5, v = id / 2."""
    return spark.createDataFrame([(int(i), day, int(i) % 5, i / 2) for i, day in rows],
                                 "id long, day string, loc long, v double")


def rows_of(store: str, uuid: str) -> list[tuple]:
    """(id, day, loc, v) of the dataset, read with pandas (independent of the Spark reader)."""
    df = kstore.read_dataset(store, uuid)
    return sorted(zip(df["id"].tolist(), df["day"].tolist(), df["loc"].tolist(), df["v"].tolist()))


def expected(rows) -> list[tuple]:
    return sorted((int(i), day, int(i) % 5, i / 2) for i, day in rows)


def kwrite(df, uuid: str, **options):
    w = df.write.format("kstore").option("dataset_uuid", uuid)
    for k, v in options.items():
        w = w.option(k, v)
    return w


DAYS = [(i, d) for d in ("d1", "d2", "d3") for i in range(3 * int(d[1]), 3 * int(d[1]) + 3)]


# ---------------------------------------------------------------------------------------
# 1. auto-registration
# ---------------------------------------------------------------------------------------


def test_default_source_is_what_pyspark_discovers():
    """What pyspark.sql.worker.lookup_data_sources accepts: a top-level ``pyspark_*`` module
    with a ``DefaultSource`` DataSource; kstore's needs no session setting (no pushFilters)."""
    import pkgutil

    import pyspark_kstore

    found = [m.name for m in pkgutil.iter_modules([str(REPO)]) if m.name.startswith("pyspark_")]
    assert found == ["pyspark_kstore"]
    src = pyspark_kstore.DefaultSource
    assert issubclass(src, DataSource) and src.name() == "kstore"
    reader_cls = src._reader_cls
    assert reader_cls.pushFilters is DataSourceReader.pushFilters  # works with filterPushdown off


_FRESH = textwrap.dedent("""
    import json, os, sys
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import pandas as pd
    import kstore
    store = sys.argv[1]
    kstore.store_dataset(store, "auto", pd.DataFrame({"id": [1, 2, 3], "day": ["a", "a", "b"]}),
                         partition_on=["day"])
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.read.format("kstore").option("dataset_uuid", "auto").load(store)
    got = sorted([r.id, r.day] for r in df.collect())
    filtered = sorted(r.id for r in df.filter("id >= 2").collect())
    (spark.createDataFrame([(4, "c")], "id long, day string").write.format("kstore")
         .option("dataset_uuid", "auto").mode("append").save(store))
    print("RESULT " + json.dumps({"rows": got, "filtered": filtered,
                                  "pushdown": spark.conf.get("spark.sql.python.filterPushdown.enabled"),
                                  "kstore_spark_imported": "kstore.spark" in sys.modules}))
    spark.stop()
""")


@pytest.mark.timeout(300)
def test_fresh_session_reads_and_writes_without_register(tmp_path):
    """A new SparkSession in a new process, kstore.spark never imported by the script: the
    data source comes from Spark's discovery of ``pyspark_kstore``. The process runs outside
    the repository, with only ``pyspark_kstore`` added to its path (as an installed wheel
    puts it in site-packages; a setuptools *strict* editable install hides it from
    ``pkgutil.iter_modules``)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "pyspark_kstore").symlink_to(REPO / "pyspark_kstore")
    script = tmp_path / "fresh.py"
    script.write_text(_FRESH)
    store = str(tmp_path / "store")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    proc = subprocess.run([sys.executable, str(script), store], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=280)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[0][len("RESULT "):])
    assert result["rows"] == [[1, "a"], [2, "a"], [3, "b"]]
    assert result["filtered"] == [2, 3]
    assert result["kstore_spark_imported"] is False  # no register(): the driver never imported kstore.spark
    assert result["pushdown"] == "false"  # the discovered source needs no session setting
    assert sorted(kstore.read_dataset(store, "auto")["id"].tolist()) == [1, 2, 3, 4]


# ---------------------------------------------------------------------------------------
# 2./3. what Spark refuses before kstore runs, and the idioms that work
# ---------------------------------------------------------------------------------------


def test_partition_by_is_refused_by_spark_and_partition_on_works(spark, store):
    df = frame(spark, DAYS)
    # Spark 4.3 checks .partitionBy against the (unpartitioned) table a Python data source
    # returns and raises before kstore is called: kstore cannot see or accept it.
    with pytest.raises(Exception, match="partitioning or clustering columns do not match"):
        kwrite(df, "pb").partitionBy("day").mode("append").save(store)
    assert list(kstore.open_store(store).iter_prefix("pb")) == []  # nothing written
    kwrite(df, "pb", partition_on="day").mode("append").save(store)  # the documented idiom
    meta = kstore.load_metadata(store, "pb")
    assert meta.partition_keys == ("day",) and {lbl.split("/")[0] for lbl in meta.partitions} == {"day=d1", "day=d2", "day=d3"}
    assert rows_of(store, "pb") == expected(DAYS)


def test_bare_save_and_ignore_are_refused_by_spark_and_write_mode_idioms_work(spark, store):
    df = frame(spark, DAYS[:3])
    for mode in (None, "ignore", "error", "errorifexists"):
        w = kwrite(df, "m", partition_on="day")
        w = w if mode is None else w.mode(mode)
        with pytest.raises(Exception, match=r"UNSUPPORTED_DATA_SOURCE_SAVE_MODE.*Append.*Overwrite"):
            w.save(store)
    # ErrorIfExists: write_mode=error with mode("append"): creates, then refuses
    kwrite(df, "m", partition_on="day", write_mode="error").mode("append").save(store)
    assert rows_of(store, "m") == expected(DAYS[:3])
    with pytest.raises(Exception, match="'m' already exists") as info:
        kwrite(frame(spark, DAYS[3:]), "m", write_mode="error").mode("append").save(store)
    assert DatasetExistsError.__name__ in str(info.value)
    # Ignore: write_mode=ignore writes nothing into an existing dataset (no commit) ...
    before = kstore.load_metadata(store, "m").version
    kwrite(frame(spark, DAYS[3:]), "m", write_mode="ignore").mode("append").save(store)
    assert kstore.load_metadata(store, "m").version == before and rows_of(store, "m") == expected(DAYS[:3])
    # ... and creates a missing one
    kwrite(frame(spark, DAYS[3:]), "m2", partition_on="day", write_mode="ignore").mode("append").save(store)
    assert rows_of(store, "m2") == expected(DAYS[3:])
    # mode("append") alone creates a missing dataset
    kwrite(df, "m3").mode("append").save(store)
    assert rows_of(store, "m3") == expected(DAYS[:3])
    with pytest.raises(Exception, match=r"option write_mode must be one of error, append, overwrite"):
        kwrite(df, "m3", write_mode="ignor").mode("append").save(store)


# ---------------------------------------------------------------------------------------
# 4. mergeSchema
# ---------------------------------------------------------------------------------------


def test_merge_schema_option(spark, store):
    kwrite(frame(spark, DAYS[:3]), "ms", partition_on="day").mode("append").save(store)
    wider = spark.createDataFrame([(100, "d9", 0, 50.0, "new")], "id long, day string, loc long, v double, extra string")
    with pytest.raises(Exception, match=SchemaMismatchError.__name__):
        kwrite(wider, "ms").mode("append").save(store)
    kwrite(wider, "ms", mergeSchema="true").mode("append").save(store)
    df = kstore.read_dataset(store, "ms")
    got = sorted(zip(df["id"].tolist(), df["day"].tolist(), [None if pd.isna(x) else x for x in df["extra"]]))
    assert got == [(3, "d1", None), (4, "d1", None), (5, "d1", None), (100, "d9", "new")]
    back = spark.read.format("kstore").option("dataset_uuid", "ms").load(store)
    assert sorted((r.id, r.extra) for r in back.collect()) == [(3, None), (4, None), (5, None), (100, "new")]
    with pytest.raises(Exception, match="mergeSchema='true' and schema_mode='strict' disagree"):
        kwrite(wider, "ms", mergeSchema="true", schema_mode="strict").mode("append").save(store)
    with pytest.raises(Exception, match="mergeSchema must be 'true' or 'false'"):
        kwrite(wider, "ms", mergeSchema="yes").mode("append").save(store)


# ---------------------------------------------------------------------------------------
# 5. dynamic partition overwrite, replaceWhere
# ---------------------------------------------------------------------------------------


def test_partition_overwrite_mode_dynamic_option(spark, store):
    kwrite(frame(spark, DAYS), "dyn", partition_on="day").mode("append").save(store)
    new = [(100, "d2"), (101, "d2"), (102, "d4")]
    kwrite(frame(spark, new), "dyn", partitionOverwriteMode="dynamic").mode("overwrite").save(store)
    assert rows_of(store, "dyn") == expected([r for r in DAYS if r[1] != "d2"] + new)
    assert kstore.history(store, "dyn")[-1].operation == "overwrite_partitions"
    # static (Spark's default) replaces the dataset
    kwrite(frame(spark, new[:1]), "dyn", partitionOverwriteMode="STATIC").mode("overwrite").save(store)
    assert rows_of(store, "dyn") == expected(new[:1])
    # dynamic on a missing dataset creates it; on an unpartitioned one it replaces it (as Spark)
    kwrite(frame(spark, new), "dyn2", partition_on="day", partitionOverwriteMode="dynamic").mode("overwrite").save(store)
    assert rows_of(store, "dyn2") == expected(new)
    kwrite(frame(spark, DAYS), "flat").mode("append").save(store)
    kwrite(frame(spark, new), "flat", partitionOverwriteMode="dynamic").mode("overwrite").save(store)
    assert rows_of(store, "flat") == expected(new)
    with pytest.raises(Exception, match="partitionOverwriteMode must be 'static' or 'dynamic'"):
        kwrite(frame(spark, new), "dyn", partitionOverwriteMode="dynamik").mode("overwrite").save(store)
    with pytest.raises(Exception, match="write_mode and partitionOverwriteMode=dynamic both choose"):
        kwrite(frame(spark, new), "dyn", partitionOverwriteMode="dynamic",
               write_mode="overwrite").mode("overwrite").save(store)


def test_session_conf_dynamic_is_invisible_to_python_sources(spark, store):
    """Spark 4.3 gives a Python data source's writer only the write's options and an
    ``overwrite`` flag (in a Python worker without a SparkSession): the session setting
    ``spark.sql.sources.partitionOverwriteMode`` never reaches kstore, so ``mode("overwrite")``
    replaces the dataset. The guide says so and names the option that works."""
    kwrite(frame(spark, DAYS), "conf", partition_on="day").mode("append").save(store)
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        kwrite(frame(spark, [(100, "d2")]), "conf", partition_on="day").mode("overwrite").save(store)
        assert rows_of(store, "conf") == expected([(100, "d2")])  # d1 and d3 are gone too
        kwrite(frame(spark, DAYS), "conf", partition_on="day").mode("overwrite").save(store)
        kwrite(frame(spark, [(100, "d2")]), "conf", partitionOverwriteMode="dynamic").mode("overwrite").save(store)
        assert rows_of(store, "conf") == expected([r for r in DAYS if r[1] != "d2"] + [(100, "d2")])
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")


def _disk_data_keys(root: str, uuid: str) -> set[str]:
    st = kstore.open_store(root)
    return {k for k in st.iter_prefix(uuid + "/") if k.endswith(".parquet")
            and "/indices/" not in k and "/_kstore/" not in k}


def test_replace_where(spark, store):
    kwrite(frame(spark, DAYS), "rw", partition_on="day").mode("append").save(store)
    new = [(100, "d1"), (101, "d1")]
    kwrite(frame(spark, new), "rw", replaceWhere="day = 'd1'").mode("overwrite").save(store)
    assert rows_of(store, "rw") == expected([r for r in DAYS if r[1] != "d1"] + new)
    # IN: every selected partition is replaced, also one the new rows do not hold (d3: deleted)
    kwrite(frame(spark, [(200, "d2")]), "rw", replaceWhere="day IN ('d2', 'd3')").mode("overwrite").save(store)
    assert rows_of(store, "rw") == expected(new + [(200, "d2")])
    version = kstore.load_metadata(store, "rw").version
    on_disk = _disk_data_keys(store, "rw")
    # rows outside the condition: nothing committed, no file left in the dataset
    with pytest.raises(Exception, match=r"rows outside the condition \(partition day='d2'\)"):
        kwrite(frame(spark, [(300, "d1"), (301, "d2")]), "rw", replaceWhere="day = 'd1'").mode("overwrite").save(store)
    assert kstore.load_metadata(store, "rw").version == version
    assert rows_of(store, "rw") == expected(new + [(200, "d2")])
    assert _disk_data_keys(store, "rw") == on_disk  # the refused write's files were deleted
    # only partition-column equality / IN joined by AND
    for cond, msg in [("loc = 1", r"\['loc'\] are not partition columns"),
                      ("day = 'd1' OR day = 'd2'", "unexpected 'OR'"),
                      ("day >= 'd1'", "unexpected '>='"),
                      ("upper(day) = 'D1'", r"unexpected '\('")]:
        with pytest.raises(Exception, match=msg) as info:
            kwrite(frame(spark, new), "rw", replaceWhere=cond).mode("overwrite").save(store)
        assert InvalidArgumentError.__name__ in str(info.value)
    with pytest.raises(Exception, match=r"replaceWhere replaces data: use it with .mode\('overwrite'\)"):
        kwrite(frame(spark, new), "rw", replaceWhere="day = 'd1'").mode("append").save(store)
    assert rows_of(store, "rw") == expected(new + [(200, "d2")])


def test_replace_where_typed_partitions(spark, store):
    df = spark.createDataFrame([(1, 10, "2024-01-01"), (2, 20, "2024-01-02"), (3, 10, "2024-01-02")],
                               "id long, k int, day string").selectExpr("id", "k", "CAST(day AS DATE) AS day")
    kwrite(df, "typed", partition_on="k,day").mode("append").save(store)
    repl = spark.createDataFrame([(9, 10, "2024-01-02")], "id long, k int, day string").selectExpr(
        "id", "k", "CAST(day AS DATE) AS day")
    kwrite(repl, "typed", replaceWhere="k = 10 AND day = DATE'2024-01-02'").mode("overwrite").save(store)
    got = kstore.read_dataset(store, "typed")
    assert sorted(zip(got["id"].tolist(), got["k"].tolist(), [str(d)[:10] for d in got["day"]])) == [
        (1, 10, "2024-01-01"), (2, 20, "2024-01-02"), (9, 10, "2024-01-02")]


# ---------------------------------------------------------------------------------------
# 7. column pruning: bytes read, measured
# ---------------------------------------------------------------------------------------


class _CountingFile(io.FileIO):
    def __init__(self, path: str, log: str, key: str) -> None:
        super().__init__(path, "r")
        self.log, self.key, self.nread = log, key, 0

    def read(self, size: int = -1) -> bytes:
        data = super().read(size)
        self.nread += len(data or b"")
        return data

    def readinto(self, buffer) -> int:
        n = super().readinto(buffer) or 0
        self.nread += n
        return n

    def close(self) -> None:
        if not self.closed:
            with open(self.log, "a") as fh:
                fh.write(f"{self.key} {self.nread}\n")
        super().close()


class _CountingStore(LocalStore):
    """Logs the bytes read from every data file opened (executors are other processes)."""

    def __init__(self, root: str, log: str) -> None:
        super().__init__(root)
        self.url = None
        self.log = log

    def __reduce__(self):
        return (_CountingStore, (self.root, self.log))

    def open(self, key: str):
        if "/table/" not in key:
            return super().open(key)
        return _CountingFile(self._path(key), self.log, key)


def _bytes_read(log: Path) -> int:
    total = sum(int(line.split()[-1]) for line in log.read_text().splitlines()) if log.exists() else 0
    log.write_text("")
    return total


def test_column_pruning_bytes_read(spark, store, tmp_path):
    wide = spark.range(20_000).selectExpr(
        "id", "CAST(id % 4 AS STRING) AS day", "CAST(id % 50 AS INT) AS qty",
        *[f"sha2(CAST(id * {k} AS STRING), 256) AS w{k}" for k in range(1, 5)])
    ks.store_dataset(store, "wide", wide, partition_on="day", shuffle="repartition")
    log = tmp_path / "bytes.log"
    counted = ks.store_option(lambda: _CountingStore(store, str(log)))
    want = sorted(k % 50 for k in range(20_000))

    def load(**opts):
        r = spark.read.format("kstore").option("dataset_uuid", "wide")
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load(counted)

    _bytes_read(log)
    everything = load().select("qty")
    assert sorted(r.qty for r in everything.collect()) == want
    unpruned = _bytes_read(log)
    # Spark 4.3 never tells a Python data source which columns a query needs
    # (PythonScanBuilder implements only SupportsPushDownFilters): the scan reads all of them
    assert everything.schema.fieldNames() == ["qty"]
    assert "ReadSchema: struct<day:string,id:bigint,qty:int,w1:string" in _explain(everything)
    full = load()
    assert sorted(r.qty for r in full.collect()) == want
    assert _bytes_read(log) == unpruned

    pruned_df = load(columns="qty")
    assert sorted(r.qty for r in pruned_df.collect()) == want
    pruned = _bytes_read(log)
    assert "ReadSchema: struct<qty:int>" in _explain(pruned_df)
    by_schema = spark.read.format("kstore").schema("qty int").option("dataset_uuid", "wide").load(counted)
    assert sorted(r.qty for r in by_schema.collect()) == want
    assert _bytes_read(log) == pruned
    print(f"\nbytes read for select('qty'): {unpruned:,} without pruning, {pruned:,} with columns='qty'")
    assert pruned * 10 < unpruned


def _explain(df) -> str:
    return df._jdf.queryExecution().explainString(
        df.sparkSession._jvm.org.apache.spark.sql.execution.ExplainMode.fromString("formatted"))


# ---------------------------------------------------------------------------------------
# 8. explain()
# ---------------------------------------------------------------------------------------


def test_explain_shows_the_read_schema_and_what_spark_pushed(spark, store):
    kwrite(frame(spark, DAYS), "ex", partition_on="day").mode("append").save(store)
    df = (spark.read.format("kstore").option("dataset_uuid", "ex")
          .option("predicates", '[[["day", "==", "d2"]]]').option("columns", "id,day").load(store)
          .filter("id > 6"))
    plan = _explain(df)
    assert "BatchScan kstore" in plan and "ReadSchema: struct<id:bigint,day:string>" in plan
    # the scan description is Spark's constant "(Python)" and its metadata only PushedFilters
    # (shown when not empty) and ReadSchema: options (predicates) are not shown, and on
    # Spark 4.3 kstore pushes no filter (see kstore.spark.register)
    assert "PushedFilters" not in plan and "predicates" not in plan and "d2" not in plan
    assert sorted(tuple(r) for r in df.collect()) == [(7, "d2"), (8, "d2")]
    # what kstore's planner keeps for the predicates option: kstore.plan_read(...).explain()
    text = kstore.plan_read(store, "ex", predicates=[[("day", "==", "d2")]]).explain()
    labels = list(kstore.load_metadata(store, "ex").partitions)
    kept = sum(1 for label in labels if label.startswith("day=d2/"))
    assert f"partition index day: {len(labels)} -> {kept}" in text and kept >= 1


class _PushdownProbe(ks.KstoreDataSource):
    @classmethod
    def name(cls) -> str:
        return "kstore_pushdown_probe"


def test_explain_shows_filters_the_pushdown_reader_takes(spark, store):
    """Where kstore's pushdown reader is in use (``register`` on a Spark whose scans keep
    their own read plan), ``explain("formatted")`` lists the filters kstore evaluates
    exactly; shown here with a separately named source, for one query only."""
    kwrite(frame(spark, DAYS), "exp", partition_on="day").mode("append").save(store)
    spark.dataSource.register(_PushdownProbe)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = (spark.read.format("kstore_pushdown_probe").option("dataset_uuid", "exp").load(store)
              .filter("id > 6 AND v < 4.2"))
        plan = _explain(df)
        assert sorted(r.id for r in df.collect()) == [7, 8]
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    # id > 6 is exact in kstore; v < 4.2 (a float: NaN ordering differs) only prunes, Spark keeps it
    pushed = next(line for line in plan.splitlines() if line.startswith("PushedFilters"))
    assert pushed == "PushedFilters: [IsNotNull(id), IsNotNull(v), GreaterThan(id,6)]"


def test_write_option_names_in_errors(spark, store):
    with pytest.raises(Exception, match=r"no write option 'mergeschemas' \(did you mean 'mergeSchema'\?\).*"
                                        r"mergeSchema, metadata"):
        kwrite(frame(spark, DAYS[:1]), "o", mergeSchemas="true").mode("append").save(store)


@pytest.mark.parametrize("value", ["no", 0, pd.Series([True])], ids=["text", "int", "series"])
def test_register_takes_true_or_false_only(spark, value):
    before = spark.conf.get("spark.sql.python.filterPushdown.enabled", None)
    with pytest.raises(InvalidArgumentError, match="filter_pushdown"):
        ks.register(spark, filter_pushdown=value)
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled", None) == before  # nothing changed
