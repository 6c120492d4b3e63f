"""A streaming query into kstore killed at random moments and restarted from its checkpoint
(#31 item 5: "a query killed and restarted mid-batch commits each batch once"). Each run is a
fresh ``local[2]`` Spark in a subprocess (``_stream_kill_worker.py``), so this module needs no
shared session and runs beside the Spark group. ``KSTORE_STREAM_KILLS`` (default 2) and
``KSTORE_STREAM_KILL_SEED`` (default 31) set the rounds and the schedule."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

import kstore  # noqa: E402
from tests.drivers.test_spark_streaming import _source_file  # noqa: E402

pytestmark = [pytest.mark.spark]


def test_stream_sink_survives_killed_queries(tmp_path):
    """The query's process is SIGKILLed at seeded random moments (while Spark starts, while a
    micro-batch writes, commits, or records its offsets) and started again from its checkpoint,
    until every file is processed: every row is in the dataset exactly once and each micro-batch
    is one version (distinct, increasing batch ids)."""
    import random
    import signal
    import subprocess
    import sys
    import time

    rng = random.Random(int(os.environ.get("KSTORE_STREAM_KILL_SEED", "31")))
    rounds = int(os.environ.get("KSTORE_STREAM_KILLS", "2"))
    src, store, ck = tmp_path / "src", str(tmp_path / "store"), str(tmp_path / "ck")
    n_files = 12
    for f in range(n_files):
        _source_file(src, f"f{f:02d}", range(f * 10, f * 10 + 10))
    worker = [sys.executable, str(Path(__file__).with_name("_stream_kill_worker.py")), str(src), store, ck]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    def versions() -> int:
        try:
            return len(kstore.history(store, "sink"))
        except KstoreError:
            return 0

    from kstore.errors import KstoreError

    killed = []
    for _ in range(rounds):
        before = versions()
        proc = subprocess.Popen(worker, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + 120
        while proc.poll() is None and versions() == before and time.monotonic() < deadline:
            time.sleep(0.05)  # until the restarted query commits a micro-batch
        time.sleep(rng.uniform(0, 1.5))  # then somewhere in the next micro-batches
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its Python workers, at once
            killed.append(versions())
        proc.wait()
    final = subprocess.run(worker, env=env, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr[-3000:]
    got = kstore.read_dataset(store, "sink")
    assert sorted(got["id"]) == list(range(n_files * 10))  # every row exactly once
    batches = [e.txn[1] for e in kstore.history(store, "sink")]
    # one version per committed micro-batch, none twice (after a restart Spark may plan one batch
    # over several files: the count of versions is at most the count of files)
    assert batches == sorted(set(batches)) and 0 < len(batches) <= n_files
    assert killed and all(0 < k < n_files for k in killed), killed  # killed mid-stream, after commits
