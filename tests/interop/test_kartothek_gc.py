"""kartothek's update / GC fixtures behave the same in kstore.

``pub_updated`` was updated by kartothek and not garbage collected: kstore's GC must delete
exactly the keys kartothek's ``garbage_collect_dataset`` deleted (``unreferenced_keys``),
leaving the store as kartothek left ``pub_gc``, and the data must read the same before and after.
"""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path

import kstore
from tests.interop.fixtures import FIXTURE_ROOT as FIXTURES


def _expected(uuid: str) -> dict:
    return json.loads((FIXTURES / "expected" / f"{uuid}.json").read_text())


def _keys(root: Path, uuid: str) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
            and p.relative_to(root).as_posix().startswith(uuid)}


def test_gc_of_kartothek_updated_dataset_matches_kartothek(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(FIXTURES / "store", root)
    exp = _expected("pub_updated")
    before = kstore.read_dataset(str(root), "pub_updated").sort_values("row_id").reset_index(drop=True)
    assert _keys(root, "pub_updated") == set(exp["store_keys"])
    result = kstore.garbage_collect(str(root), "pub_updated", retention=timedelta(0))
    assert set(result.deleted_files) == set(exp["unreferenced_keys"]) and exp["unreferenced_keys"]
    assert _keys(root, "pub_updated") == set(exp["store_keys"]) - set(exp["unreferenced_keys"])
    after = kstore.read_dataset(str(root), "pub_updated").sort_values("row_id").reset_index(drop=True)
    assert after.equals(before)
    # the collected dataset has the shape kartothek's own GC left for pub_gc
    gc_exp = _expected("pub_gc")
    assert len(_keys(root, "pub_updated")) == len(gc_exp["store_keys"])
    assert gc_exp["unreferenced_keys"] == []


def test_gc_of_kartothek_gc_dataset_deletes_nothing(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(FIXTURES / "store", root)
    keys = _keys(root, "pub_gc")
    result = kstore.garbage_collect(str(root), "pub_gc", retention=timedelta(0))
    assert result.deleted_files == ()
    assert _keys(root, "pub_gc") == keys
