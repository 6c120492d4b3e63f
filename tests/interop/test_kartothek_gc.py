"""kartothek's update / GC fixtures behave the same in kstore.

``pub_updated`` was updated by kartothek and not garbage collected: kstore's GC must delete
exactly the keys kartothek's ``garbage_collect_dataset`` deleted (``unreferenced_keys``),
leaving the store as kartothek left ``pub_gc``, and the data must read the same before and after.
"""

from __future__ import annotations

import functools
import json
import shutil
from datetime import timedelta
from pathlib import Path

import minimalkv
import pytest

import kstore
from kstore.core import naming
from tests.interop.fixtures import FIXTURE_ROOT as FIXTURES

plateau_api = pytest.importorskip("plateau.api.dataset")


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
    result = kstore.garbage_collect(str(root), "pub_updated", retention=timedelta(0), enforce_retention_duration=False)
    assert set(result.deleted_files) == set(exp["unreferenced_keys"]) and exp["unreferenced_keys"]
    # before deleting, GC commits its fence: version 0 of the (so far unversioned) dataset,
    # whose one log entry is the only key kartothek's GC would not have left
    assert result.fence_version == 0
    fence = naming.log_key("pub_updated", 0)
    # the log: the fence, and (format 2) the checkpoint of version 0 with its hint and its
    # history summary
    log_area = {k for k in _keys(root, "pub_updated") if k.startswith(naming.log_prefix("pub_updated"))}
    assert log_area == {fence, naming.checkpoint_key("pub_updated", 0), naming.last_checkpoint_key("pub_updated"),
                        naming.summary_key("pub_updated", 0)}
    assert _keys(root, "pub_updated") - log_area == set(exp["store_keys"]) - set(exp["unreferenced_keys"])
    after = kstore.read_dataset(str(root), "pub_updated").sort_values("row_id").reset_index(drop=True)
    assert after.equals(before)
    # kartothek's readers (plateau) read the collected dataset through its main file
    pstore = functools.partial(minimalkv.get_store_from_url, f"hfs://{root}")
    theirs = plateau_api.read_table("pub_updated", store=pstore)
    assert sorted(theirs["row_id"]) == sorted(before["row_id"])
    # the collected dataset has the shape kartothek's own GC left for pub_gc (+ the fence)
    gc_exp = _expected("pub_gc")
    assert len(_keys(root, "pub_updated") - log_area) == len(gc_exp["store_keys"])
    assert gc_exp["unreferenced_keys"] == []


def test_gc_of_kartothek_gc_dataset_deletes_nothing(tmp_path):
    root = tmp_path / "store"
    shutil.copytree(FIXTURES / "store", root)
    keys = _keys(root, "pub_gc")
    result = kstore.garbage_collect(str(root), "pub_gc", retention=timedelta(0), enforce_retention_duration=False)
    assert result.deleted_files == () and result.fence_version is None  # nothing to delete: no fence
    assert _keys(root, "pub_gc") == keys
