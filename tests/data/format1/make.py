"""Writes the format-1 datasets under this folder (kstore before format 2, commit e105b93).

They are the "existing datasets keep working" fixtures of issue #12: log entries holding the
full metadata, a statistics file per version, index files. Regenerate only with that
kstore (a later one writes format 2)::

    git worktree add /tmp/oldks e105b93
    PYTHONPATH=/tmp/oldks python tests/data/format1/make.py tests/data/format1

- ``hostile/``: dataset ``ds`` = the hostile-input tests' frame, partitioned on ``p``,
  indexed on ``x`` (one version).
- ``history/``: dataset ``h`` partitioned on ``p`` and indexed on ``x``, 4 versions: create,
  append, overwrite of partition p=1, delete_rows of id 4; and dataset ``m``, the same first
  two versions in msgpack.zstd.
"""

from __future__ import annotations

import sys

import pandas as pd

import kstore


def main(out: str) -> None:
    assert kstore.open_dataset  # noqa: S101  (the generating kstore)
    hostile = out + "/hostile"
    kstore.store_dataset(hostile, "ds", pd.DataFrame({"p": [1, 1, 2], "x": [3, 4, 5], "s": ["a", "b", "c"]}),
                         partition_on="p", secondary_indices=["x"])
    hist = out + "/history"
    df = pd.DataFrame({"p": [1, 1, 2], "x": [3, 4, 5], "id": [0, 1, 2]})
    kstore.store_dataset(hist, "h", df, partition_on="p", secondary_indices=["x"])
    kstore.update_dataset(hist, "h", pd.DataFrame({"p": [2, 3], "x": [6, 7], "id": [3, 4]}))
    kstore.update_dataset(hist, "h", pd.DataFrame({"p": [1], "x": [9], "id": [5]}), mode="overwrite_partitions")
    kstore.delete_rows(hist, "h", [[("id", "==", 4)]])
    kstore.store_dataset(hist, "m", df, partition_on="p", secondary_indices=["x"], metadata_format="msgpack.zstd")
    kstore.update_dataset(hist, "m", pd.DataFrame({"p": [2, 3], "x": [6, 7], "id": [3, 4]}))


if __name__ == "__main__":
    main(sys.argv[1])
