"""kstore.spark.configure and the options that name a dataset, without starting a session:
what a builder gets, what happens where the jar is absent, and how a path names a dataset."""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402

import kstore.spark as ks  # noqa: E402
from kstore.errors import InvalidArgumentError  # noqa: E402
from kstore.io.memory import MemoryStore  # noqa: E402
from kstore.spark import jvm  # noqa: E402
from kstore.spark.reader import store_and_dataset  # noqa: E402


def test_configure_adds_the_jar_once_and_keeps_other_jars(monkeypatch, tmp_path):
    jar = tmp_path / "kstore-spark.jar"
    jar.write_bytes(b"PK")
    monkeypatch.setattr(jvm, "_JAR", str(jar))
    builder = (SparkSession.builder.config("spark.jars", "/opt/other.jar")
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension"))
    out = ks.configure(builder)
    assert out is builder
    assert builder._options["spark.jars"] == f"/opt/other.jar,{jar}"
    extensions = "io.delta.sql.DeltaSparkSessionExtension,io.kstore.spark.KstoreSparkExtensions"
    assert builder._options["spark.sql.extensions"] == extensions  # SQL on a path; Delta's stays
    ks.configure(builder)  # twice: the jar is listed once, the class wrapped once
    assert builder._options["spark.jars"] == f"/opt/other.jar,{jar}"
    assert builder._options["spark.sql.extensions"] == extensions
    assert type(builder) is ks._registering(SparkSession.Builder)  # wrapped once, not twice
    assert type(builder).getOrCreate is not SparkSession.Builder.getOrCreate
    # a fresh builder is not affected
    assert type(SparkSession.builder) is SparkSession.Builder


def test_configure_without_the_jar_says_the_python_source_serves(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(jvm, "_JAR", str(tmp_path / "absent.jar"))
    builder = SparkSession.builder
    with caplog.at_level(logging.WARNING, logger="kstore.spark"):
        ks.configure(builder)
    assert "spark.jars" not in builder._options and "spark.sql.extensions" not in builder._options
    assert any("not built" in r.getMessage() and "Python data source" in r.getMessage() for r in caplog.records)
    assert type(builder).getOrCreate is not SparkSession.Builder.getOrCreate  # still registers the Python source


@pytest.mark.parametrize("path, want", [
    ("/data/store/sales", ("/data/store", "sales")),
    ("/data/store/sales/", ("/data/store", "sales")),
    ("file:///data/store/sales", ("file:///data/store", "sales")),
    ("s3://bucket/sales", ("s3://bucket", "sales")),
    ("s3://bucket/p/sales?endpoint_url=http://127.0.0.1:9000", ("s3://bucket/p?endpoint_url=http://127.0.0.1:9000",
                                                                "sales")),
])
def test_a_path_names_a_dataset(path, want):
    assert store_and_dataset({"path": path}, "load") == want
    assert store_and_dataset({"path": path, "dataset_uuid": "other"}, "load") == (path, "other")


@pytest.mark.parametrize("path", ["/sales", "sales", "s3://bucket", "s3://bucket/", "file:///", "kstore-store:abc"])
def test_a_path_without_a_dataset_is_refused(path):
    with pytest.raises(InvalidArgumentError, match="dataset"):
        store_and_dataset({"path": path}, "save")


def test_no_path_is_refused():
    with pytest.raises(InvalidArgumentError, match=r"\.save\('<store>/<dataset>'\)"):
        store_and_dataset({}, "save")


def test_the_jvm_source_refuses_stores_it_cannot_list():
    with pytest.raises(InvalidArgumentError, match="kstore_python"):
        jvm._local_root(MemoryStore())


def test_the_jvm_planner_loads_a_pinned_version_once_and_never_serves_a_stale_one(tmp_path, monkeypatch):
    import json

    import pandas as pd

    import kstore
    import kstore.blocks.snapshot as snapshot_module

    kstore.store_dataset(str(tmp_path), "ds", pd.DataFrame({"p": [1, 1, 2], "x": [1, 2, 3]}), partition_on=["p"],
                         secondary_indices=["x"])
    planner = jvm.Planner(None)  # type: ignore[arg-type]  # resolve/plan need no session
    first = json.loads(planner.resolve(json.dumps({"path": f"{tmp_path}/ds"})))
    loads = []
    real = snapshot_module.open_snapshot
    monkeypatch.setattr(snapshot_module, "open_snapshot", lambda *a, **k: loads.append(a) or real(*a, **k))
    handle = json.dumps(first["handle"])
    every = json.loads(planner.plan(handle, "[]"))["files"]
    point = json.loads(planner.plan(handle, '[[["x", "==", 3]]]'))["files"]
    assert loads == []  # listFiles plans on the snapshot resolve loaded
    assert len(every) == len(kstore.plan_read(str(tmp_path), "ds").tasks) and len(point) == 1
    assert point[0]["partition"] == {"p": 2}
    kstore.update_dataset(str(tmp_path), "ds", pd.DataFrame({"p": [3], "x": [4]}))
    second = json.loads(planner.resolve(json.dumps({"path": f"{tmp_path}/ds"})))
    assert second["version"] == first["version"] + 1
    newer = json.loads(planner.plan(json.dumps(second["handle"]), "[]"))["files"]
    assert len(newer) == len(every) + 1  # the new version's files, not the cached old ones
    assert len(json.loads(planner.plan(handle, "[]"))["files"]) == len(every)  # the old handle: still its version


def test_the_jvm_source_refuses_a_write_it_could_not_read_back_before_writing(tmp_path):
    # Spark reads the dataset back at the end of save(): a refusal then would follow the commit
    planner = jvm.Planner(None)  # type: ignore[arg-type]
    request = {"mode": "Append", "options": {"path": "memory://somewhere/ds"}, "partition_by": None}
    with pytest.raises(InvalidArgumentError, match="kstore_python"):
        planner.write(None, json.dumps(request))
