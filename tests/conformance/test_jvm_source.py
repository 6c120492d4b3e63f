"""The conformance suite with kstore's JVM Spark source as reader and writer.

The JVM source needs a session started with its jar (``kstore.spark.configure``), and there
``format("kstore")`` is the JVM source, so the suite runs once more in a subprocess whose
``spark`` fixture is configured (``KSTORE_SPARK_JVM=1``): the ``spark_jvm`` reader (every
column, projection, predicate pushed by Spark and evaluated by Spark, DataFrame reuse) and
writer (``partitionBy`` + ``save(path)``, every layout, read back by the other engines)
against the same oracle, 0 differences allowed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from tests.conformance import drivers, matrix  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group(drivers.SPARK_GROUP)]

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(matrix.JVM, reason="this is the outer run; the inner run is KSTORE_SPARK_JVM=1")
def test_the_jvm_source_conforms():
    from tests.drivers.test_spark_jvm import _build_jar

    _build_jar()
    env = dict(os.environ, KSTORE_SPARK_JVM="1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                           str(REPO / "tests" / "conformance"), "-k", "spark_jvm"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    tail = proc.stdout[-6000:]
    assert proc.returncode == 0, tail + proc.stderr[-2000:]
    passed = re.search(r"(\d+) passed", tail)
    # reads (full, predicates x2, reuse), a round trip per layout, other engines' datasets read back
    assert passed and int(passed.group(1)) >= 4 + len(matrix.LAYOUTS) + 3, tail
