"""The README's main job runs: ``examples/spark_pipeline.py`` (what ``bash scripts/demo.sh``
runs after the set-up), as a user runs it, in its own process and Spark session, on fewer
rows. It checks its own results against Spark filtering the source rows (the script
asserts them); here the run must succeed, say which data source it used, and print each
step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kstore.spark import jvm

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

ROOT = Path(__file__).resolve().parents[2]


def test_the_spark_demo_pipeline_runs_end_to_end(tmp_path):
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "spark_pipeline.py"), "--store",
                           str(tmp_path / "store"), "--rows", "20000"], capture_output=True, text=True, env=env,
                          timeout=600, cwd=ROOT)
    out = done.stdout
    assert done.returncode == 0, (out[-3000:], done.stderr[-3000:])
    native = jvm.jar_path() is not None
    assert ("kstore's JVM data source" if native else "kstore's Python data source") in out
    for step in ("[write] 20,000 rows", "[plan] location == 7", "[spark] filter location = 7", "[pandas]",
                 "version 0:", "version 1:"):
        assert step in out, (step, out[-3000:])
    if native:
        assert "[append + dynamic overwrite of 2024-01-05] rows at version 0: 20,000" in out
        assert "version 2:" in out
    # nothing a user would trip on: no Python warning, no Spark warning (the JVM's own notice
    # about the incubator module Spark 4 loads is printed for every Spark job)
    noise = [line for line in done.stderr.splitlines()
             if line.strip() and line != "WARNING: Using incubator modules: jdk.incubator.vector"]
    assert not noise, "\n".join(noise[-40:])
