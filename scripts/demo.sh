#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job: a PySpark pipeline (local[2], embedded
# local directory store) that writes a partitioned, indexed dataset, reads it back with an
# indexed filter through Spark and through pandas, and prints the plan.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/spark_pipeline.py "$@"
