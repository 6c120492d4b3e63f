"""Writes the dataset under this folder: format 2 with checkpoints in the layout before
derived keys (every column stored, kstore commit 53414a1).

The "existing datasets keep working" fixture for derived-key checkpoints (issue #12):
dataset ``c`` partitioned on ``p`` and indexed on ``x``, 12 versions: create (v0), 10
appends of one partition each (v1-v10, a checkpoint at v10), and a delete of partition
p=2 (v11). Version v has ids 0 .. v (one row per version) less id 2 from v11 on. Regenerate
only with that kstore (a later one writes derived keys)::

    git worktree add /tmp/oldks 53414a1
    PYTHONPATH=/tmp/oldks python tests/data/checkpoint1/make.py tests/data/checkpoint1
"""

from __future__ import annotations

import sys

import pandas as pd

import kstore


def main(out: str) -> None:
    kstore.store_dataset(out, "c", pd.DataFrame({"p": [0], "x": [0], "id": [0]}), partition_on="p",
                         secondary_indices=["x"])
    for i in range(1, 11):
        kstore.update_dataset(out, "c", pd.DataFrame({"p": [i], "x": [i % 3], "id": [i]}))
    kstore.update_dataset(out, "c", delete_scope=[{"p": 2}])


if __name__ == "__main__":
    main(sys.argv[1])
