"""Datasets written by kstore before format 2 (``tests/data/format1/``, see its make.py),
copied into any store: the "existing datasets keep working" fixtures of issue #12."""

from __future__ import annotations

from pathlib import Path

import kstore

DATA = Path(__file__).parent / "data" / "format1"


def copy_format1(url: str, fixture: str, dataset_uuid: str) -> None:
    """Put every key of dataset ``dataset_uuid`` from fixture folder ``fixture`` into ``url``."""
    root = DATA / fixture
    st = kstore.open_store(url)
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel.startswith((dataset_uuid + "/", dataset_uuid + ".by-dataset")):
            st.put(rel, path.read_bytes())
