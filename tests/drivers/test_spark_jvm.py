"""kstore's JVM data source (issue #31): Spark's Parquet scan over kstore's plan.

A session with the JVM source differs from the test suite's shared session (the jar must be
on ``spark.jars`` when the JVM starts, and there ``format("kstore")`` is the JVM source), so
every check runs in one fresh ``local[2]`` session in a subprocess (``_spark_jvm_worker.py``),
started with ``kstore.spark.configure``; each test asserts on its part.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

REPO = Path(__file__).resolve().parents[2]
JAR = REPO / "kstore" / "spark" / "jvm" / "kstore-spark.jar"


def _build_jar() -> None:
    sources = list((REPO / "kstore" / "spark" / "jvm" / "src").rglob("*.java"))
    if JAR.exists() and all(s.stat().st_mtime <= JAR.stat().st_mtime for s in sources):
        return
    if shutil.which("javac") is None:
        message = "kstore's JVM source needs javac (JDK 17) to build kstore-spark.jar (scripts/setup.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI machines have a JDK: a missing one is a broken setup, not a skip
        pytest.skip(message)
    subprocess.run(["bash", str(REPO / "scripts" / "build_jvm.sh"), sys.executable], check=True, timeout=300)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    _build_jar()
    root = tmp_path_factory.mktemp("jvm") / "store"
    root.mkdir()
    out = root.parent / "results.json"
    env = dict(os.environ, PYTHONPATH=str(REPO), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("_spark_jvm_worker.py")), str(root), str(out)],
                          env=env, capture_output=True, text=True, timeout=420)
    if not out.exists():
        pytest.fail(f"the JVM worker failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def _ok(results: dict, name: str) -> dict:
    value = results[name]
    if isinstance(value, dict) and "error" in value:
        pytest.fail(value["error"])
    return value


def test_jvm_read_returns_the_rows(results):
    r = _ok(results, "rows_equal")
    assert r["equal"] and r["n"] == 2000
    assert r["columns"] == ["day", "id", "qty", "name"]  # kstore's column order, partition column included


def test_jvm_select_reads_one_column(results):
    scan = _ok(results, "select_one")["scan"]
    assert "ReadSchema: struct<qty:double>" in scan and "KstoreFileIndex" in scan


@pytest.mark.parametrize("name", ["partition_filter", "index_filter", "index_in_or"])
def test_jvm_filter_reads_only_planned_files(results, name):
    r = _ok(results, name)
    assert r["files_read"] == r["planned"] == r["callback_planned"], r
    assert r["planned"] < 5 or name == "index_in_or"


def test_jvm_partition_expression_spark_cannot_push(results):
    r = _ok(results, "string_partition_expr")  # kstore gets no term; the index re-checks partitions
    assert r["rows"] == 400 and r["files_read"] == 1


def test_jvm_write_partition_by_modes_and_dynamic_overwrite(results):
    r = _ok(results, "writes")
    assert r["partition_keys"] == ["day"]
    assert r["after_overwrite"] == 30 and r["after_append"] == 35
    assert r["after_dynamic"] == 26 and r["day1_ids"] == [999]  # only 2024-02-01 replaced
    assert r["jvm_read_count"] == 26


def test_jvm_source_wins_the_name_python_source_is_kstore_python(results):
    # Spark looks up JVM sources (ServiceLoader) before Python ones and refuses a Python
    # source of the same name: register() gives the Python source "kstore_python" there,
    # and read_dataset (the Python source's options) keeps working on the session.
    r = _ok(results, "python_register")
    assert r["served_by"] == "jvm" and r["register"] == "kstore_python"
    assert r["read_dataset"] == 10 and r["python_source"] == 2000


def test_jvm_delta_idioms_on_a_path(results):
    r = _ok(results, "delta_idioms")
    assert r["bare_save"] == 12
    assert "exists" in r["second_bare_save"].lower(), r["second_bare_save"]
    assert r["after_ignore"] == 12
    assert "changes its partitioning" in r["repartition_without_overwrite_schema"]
    assert r["partition_keys"] == ["day"]
    assert r["after_append"] == list(range(12)) + [100]
    assert r["version_as_of"] == r["version_as_of_want"] == 12
    assert r["timestamp_as_of"] == 12
    assert r["after_replace_where"] == r["want_after_replace_where"]
    # SQL on a path (spark.sql.extensions: kstore's parser), with VERSION / TIMESTAMP AS OF
    assert r["sql_on_path"] == r["sql_on_path_want"] > 0
    assert r["sql_version_as_of"] == r["sql_timestamp_as_of"] == 12
    assert r["sql_join_versions"] == r["sql_join_want"] != []  # id 100 came later: not in the old version


def test_jvm_refusals_name_the_problem(results):
    r = _ok(results, "refusals")
    # kstore's error class and message, not py4j's traceback: PySpark's IllegalArgumentException
    for name in ("predicates_option", "no_dataset", "misspelt_option", "partition_by_disagrees"):
        assert r[name].startswith("IllegalArgumentException: kstore.errors.InvalidArgumentError: "), r[name]
        assert "Traceback" not in r[name], r[name]
    assert "kstore_python" in r["predicates_option"]
    assert "names no dataset" in r["no_dataset"]
    assert "did you mean 'version'" in r["misspelt_option"]
    assert "disagree" in r["partition_by_disagrees"] and not r["bad_written"]


def test_jvm_nan_rows_are_not_skipped_by_parquet_statistics(results):
    # A row group of [NaN, 0.5, 0.25] has max 0.5 in Arrow's statistics; Spark's `f > 1.0`
    # matches NaN. The JVM source does not let Spark's Parquet reader skip on floats.
    assert _ok(results, "nan_rows")["jvm"] == [1]


def test_jvm_reads_a_widened_dataset_exactly(results):
    """A widened column (int64 -> double, date -> timestamp) reads through the Python source
    (Spark's Parquet reader refuses int64 files as double); the version before stays native."""
    r = _ok(results, "widened")
    assert r["rows"] == r["want"] and r["count"] == 4
    assert (1, float(2**53), "2024-01-01 00:00:00") in [tuple(x) for x in r["rows"]]
    assert r["filtered"] == [-5.0, 0.5]
    assert r["before_types"] == ["bigint", "date", "bigint"] or r["before_types"] == ["bigint", "bigint", "date"]
    assert r["before_rows"] == [-5, 1, 2**53]
    assert r["feed"] == r["feed_want"] and len(r["feed"]) == 4  # readChangeFeed=true on the JVM source


def test_jvm_reads_renamed_and_dropped_columns(results):
    """A dropped column reads natively (the files' extra column is not read); a renamed one
    through the Python source (the files hold it under its old name)."""
    r = _ok(results, "renamed")
    assert r["native"] == {"rows": [[1, 10], [1, 20], [2, 30]], "columns": ["a", "p"]}
    assert r["rows"] == [[1, 10], [1, 20], [2, 30], [2, 40]] and r["columns"] == ["amount", "p"]
    assert r["filtered"] == [20, 30, 40]


def test_jvm_catalog_tables_and_spark_file_insert_refused(results):
    r = _ok(results, "catalog_tables")
    assert r["select"] == r["want"] > 0  # CREATE TABLE ... USING kstore LOCATION '<path>'
    for name in ("insert", "overwrite"):  # refused before anything is written or deleted
        assert "IllegalArgumentException: kstore.errors.InvalidArgumentError: INSERT INTO" in r[name], r[name]
    assert r["files_unchanged"] and r["rows_after"] == r["want"]
    assert r["managed"] == 2 and r["managed_after_append"] == r["managed_kstore_rows"] == 4  # saveAsTable


def test_jvm_stream_sink_commits_each_micro_batch_once(results):
    """``writeStream.format("kstore").partitionBy("day")`` on the JVM source: each micro-batch one
    commit under (query id, batch id); a micro-batch run again commits nothing; complete mode
    replaces the dataset."""
    r = _ok(results, "stream_sink")
    assert r["ids"] == list(range(16))  # every row once, also after batch 1 ran twice
    assert r["versions"] == 2 and [t[1] for t in r["txns"]] == [0, 1]
    assert r["txns"][0][0] == r["txns"][1][0] and r["txns"][0][0].startswith("spark-stream:")
    assert r["partition_keys"] == ["day"]
    assert r["counts"] == [["d0", 8], ["d1", 8]]
    assert "update" in r["update_mode"] and "complete" in r["update_mode"]  # refused, naming the modes
    assert not r["updated_exists"]


def test_jvm_stream_source_reads_the_dataset_then_each_append(results):
    """``readStream.format("kstore")`` on the JVM source: the dataset's rows, then only new
    versions' rows (a compaction repeats none); ``startingVersion``; a version that changed rows
    stops the stream, naming ``skipChangeCommits``, which skips it."""
    r = _ok(results, "stream_source")
    assert r["first"] == [1, 2, 3] and r["second"] == [4, 5] and r["batches_disjoint"]
    assert r["from_one"] == [3, 4, 5]
    assert r["limited"] == [1, 2, 3, 4, 5] and r["limited_batches"] == 3  # maxFilesPerTrigger=1: a version each
    assert r["stopped"].startswith("kstore.errors.InvalidArgumentError") and "skipChangeCommits" in r["stopped"]
    assert r["skipped"] == [6]
    assert r["feed"] == r["feed_expected"] and len(r["feed"]) > 6  # readChangeFeed streams on the JVM too
