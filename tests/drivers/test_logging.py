"""kstore logs through ``logging.getLogger("kstore.<part>")``: what it did, in the user's
words (dataset, version, files), silent unless the application configures logging."""

from __future__ import annotations

import logging
from datetime import timedelta

import pandas as pd
import pytest

import kstore


def _frame(n: int, offset: int = 0) -> pd.DataFrame:
    return pd.DataFrame({"p": [i % 3 for i in range(n)], "x": range(offset, offset + n)})


def test_each_step_logs_under_its_kstore_logger(tmp_path, caplog):
    store = str(tmp_path / "store")
    caplog.set_level(logging.DEBUG, logger="kstore")
    kstore.store_dataset(store, "sales", _frame(30), partition_on=["p"], secondary_indices=["x"])
    meta = kstore.update_dataset(store, "sales", _frame(6, 100))
    kstore.read_dataset(store, "sales", predicates=[[("x", "==", 101)]])
    by_logger: dict[str, list[str]] = {}
    for r in caplog.records:
        by_logger.setdefault(r.name, []).append(r.getMessage())
    assert set(by_logger) >= {"kstore.write", "kstore.commit", "kstore.load", "kstore.read"}
    assert all(name.startswith("kstore.") for name in by_logger)
    commits = [m for m in by_logger["kstore.commit"] if "committed version" in m]
    assert commits == [
        "dataset 'sales': committed version 0 (create: 3 file(s) added, 0 file(s) removed)",
        f"dataset 'sales': committed version {meta.version} (append: 3 file(s) added, 0 file(s) removed)",
    ]
    assert any("wrote 3 file(s), 6 row(s)" in m for m in by_logger["kstore.write"])
    # the plan of x == 101: the index keeps one of the three new files (and none of the old)
    assert "dataset 'sales' version 1: 1 of 6 file(s) planned" in " ".join(by_logger["kstore.read"])


def test_gc_logs_what_it_deleted_and_a_rerun_txn_logs_that_nothing_was_done(tmp_path, caplog):
    store = str(tmp_path / "store")
    kstore.store_dataset(store, "d", _frame(9), partition_on=["p"])
    kstore.update_dataset(store, "d", _frame(3), mode="overwrite_partitions", txn=("job", 1))
    caplog.set_level(logging.INFO, logger="kstore")
    kstore.update_dataset(store, "d", _frame(3), mode="overwrite_partitions", txn=("job", 1))
    assert "dataset 'd': overwrite_partitions with txn job:1 was committed before; nothing to do" in caplog.text
    res = kstore.garbage_collect(store, "d", retention=timedelta(0), enforce_retention_duration=False)
    gc_lines = [r.getMessage() for r in caplog.records if r.name == "kstore.gc"]
    assert gc_lines == [f"dataset 'd': garbage collection (retention 0:00:00): {len(res.deleted_files)} file(s) "
                        f"deleted, {len(res.expired_versions)} version(s) expired, "
                        f"{len(res.retained_versions)} retained"]
    assert len(res.deleted_files) == 3


def test_the_library_is_silent_unless_logging_is_configured(tmp_path, capsys):
    """No handler of kstore's own (a NullHandler): nothing reaches stderr by itself."""
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = []
    try:
        kstore.store_dataset(str(tmp_path / "s"), "d", _frame(3), partition_on=["p"])
        kstore.garbage_collect(str(tmp_path / "s"), "d")
    finally:
        root.handlers = saved
    assert capsys.readouterr().err == ""
    handlers = logging.getLogger("kstore").handlers
    assert handlers and all(isinstance(h, logging.NullHandler) for h in handlers)


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO])
def test_logs_never_name_credentials(s3_endpoint, caplog, level):
    import boto3

    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket="logbucket")
    store = kstore.S3Store.from_options("s3://logbucket", {"key": "AKIDSECRETKEY", "secret": "VERYSECRETVALUE",
                                                      "endpoint_url": s3_endpoint})
    caplog.set_level(level, logger="kstore")
    kstore.store_dataset(store, f"d{level}", _frame(6), partition_on=["p"])
    kstore.read_dataset(store, f"d{level}")
    assert caplog.records
    assert "VERYSECRETVALUE" not in caplog.text


def test_the_cli_shows_the_logs_with_verbose(tmp_path):
    """``kstore -v`` configures logging (the library never does): a real subprocess."""
    import subprocess
    import sys

    store = str(tmp_path / "store")
    kstore.store_dataset(store, "d", _frame(9), partition_on=["p"])
    kstore.update_dataset(store, "d", _frame(3), mode="overwrite_partitions")
    argv = [sys.executable, "-m", "kstore", "gc", store, "d", "--retention-days", "0", "--allow-short-retention", "--yes"]
    quiet = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert "kstore.gc" not in quiet.stderr
    kstore.update_dataset(store, "d", _frame(3), mode="overwrite_partitions")
    loud = subprocess.run([argv[0], "-m", "kstore", "-v", *argv[3:]], capture_output=True, text=True, timeout=300)
    assert loud.returncode == 0, loud.stderr
    assert "kstore.gc: dataset 'd': garbage collection (retention 0:00:00): 3 file(s) deleted" in loud.stderr
    assert "kstore.commit: dataset 'd': committed version" in loud.stderr  # the GC's fence commit
