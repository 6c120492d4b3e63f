"""The kstore command line, run in-process on a real local store."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

import kstore
from kstore.cli import main, parse_where


@pytest.fixture
def store(tmp_path):
    df = pd.DataFrame({"day": ["a", "a", "b", "c"], "loc": [1, 7, 7, 3], "v": [1.0, 2.0, 3.0, 4.0]})
    kstore.store_dataset(str(tmp_path), "sales", df, partition_on=["day"], secondary_indices=["loc"])
    return str(tmp_path)


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_ls_and_info(store):
    code, out = run("ls", store)
    assert code == 0 and out.split() == ["sales"]
    code, out = run("info", store, "sales")
    info = json.loads(out)
    assert info["partitions"] == 3 and info["secondary_indices"] == ["loc"] and info["partition_keys"] == ["day"]


def test_plan_prunes_with_index(store):
    code, out = run("plan", store, "sales", "--where", "loc == 7")
    assert code == 0
    assert "3 partitions -> 2 planned" in out
    assert out.count(".parquet") == 2


def test_read_with_or_and_csv(store):
    code, out = run("read", store, "sales", "--where", "loc == 1", "--or", "--where", "v >= 4", "--format", "csv")
    assert code == 0
    got = pd.read_csv(io.StringIO(out))
    assert sorted(got["loc"]) == [1, 3]


def test_bad_column_is_a_clear_error(store, capsys):
    code, _ = run("read", store, "sales", "--where", "nope == 1")
    assert code == 2
    assert "'nope'" in capsys.readouterr().err


def test_history_gc_build_indices_delete(store):
    code, out = run("build-indices", store, "sales", "v")
    assert code == 0 and "indices ['loc', 'v']" in out
    code, out = run("history", store, "sales")
    assert [line.split()[2] for line in out.strip().splitlines()] == ["create", "build_indices"]
    old = kstore.load_metadata(store, "sales")
    dropped = [k for lab, f in old.partitions.items() if lab.startswith("day=a/") for k in f.values()]
    kstore.update_dataset(store, "sales", delete_scope=[{"day": "a"}])
    code, out = run("gc", store, "sales", "--retention-days", "0", "--dry-run", "--allow-short-retention")
    assert code == 0 and out.startswith("would delete 4 files")  # day=a file, old loc + v indices, old stats
    assert kstore.open_store(store).exists(dropped[0])
    code, out = run("gc", store, "sales", "--retention-days", "0", "--allow-short-retention")
    assert code == 0 and out.startswith("deleted 4 files, expired versions [0, 1]")
    assert not kstore.open_store(store).exists(dropped[0])
    code, out = run("delete", store, "sales")
    assert code == 0
    code, out = run("ls", store)
    assert out.strip() == ""


def test_parse_where_literals():
    assert parse_where(["d >= 2024-01-02", "s == 'x y'", "n not in [1, 2]"]) == [
        [("d", ">=", "2024-01-02"), ("s", "==", "x y"), ("n", "not in", [1, 2])]
    ]
    with pytest.raises(kstore.KstoreError, match="cannot parse"):
        parse_where(["just-a-word"])


def test_a_mistyped_store_is_an_error_and_nothing_is_created(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for argv in (["ls", "typo"], ["info", "typo", "sales"], ["read", "typo", "sales"], ["history", "typo", "sales"],
                 ["ls", "file://localhost/typo/x"]):
        code, out = run(*argv)
        assert code == 2 and out == "", argv
        assert "typo" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("days", ["1e12", "nan", "-1", "inf"])
def test_gc_retention_out_of_range_is_a_usage_error(store, capsys, days):
    with pytest.raises(SystemExit) as exc:
        run("gc", store, "sales", "--retention-days", days)
    assert exc.value.code == 2
    assert "--retention-days" in capsys.readouterr().err
    assert len(kstore.history(store, "sales")) == 1

