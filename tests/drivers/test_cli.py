"""The kstore command line (click): every command through click's CliRunner on a real local
store, plus real subprocesses (``python -m kstore``, the console script) for exit codes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import kstore
from kstore.cli import cli, main, parse_where
from kstore.io.local import LocalStore


@pytest.fixture
def store(tmp_path):
    df = pd.DataFrame({"day": ["a", "a", "b", "c"], "loc": [1, 7, 7, 3], "v": [1.0, 2.0, 3.0, 4.0]})
    kstore.store_dataset(str(tmp_path), "sales", df, partition_on=["day"], secondary_indices=["loc"])
    return str(tmp_path)


def invoke(*argv: str):
    return CliRunner().invoke(cli, list(argv), catch_exceptions=False)


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_ls_and_info(store):
    res = invoke("ls", store)
    assert res.exit_code == 0 and res.output.split() == ["sales"]
    assert json.loads(invoke("ls", store, "--json").output) == ["sales"]
    # deliberately changed: humans get tables, scripts ask for --json
    info = json.loads(invoke("info", store, "sales", "--json").output)
    assert info["files"] == 3 and info["partitions"] == 3  # deliberately changed (#30): files and partitions apart
    assert info["secondary_indices"] == ["loc"] and info["partition_keys"] == ["day"]
    assert ["loc", "int64"] in info["schema"]
    human = invoke("info", store, "sales").output
    assert "partition_keys" in human and "loc" in human and "int64" in human


def test_plan_prunes_with_index(store):
    code, out = run("plan", store, "sales", "--where", "loc == 7")
    assert code == 0
    assert "3 files -> 2 planned (in 2 partitions)" in out  # deliberately changed (#30): the counts are files
    assert "secondary index loc: 3 -> 2 files" in out
    assert out.count(".parquet") == 2
    plan = json.loads(invoke("plan", store, "sales", "--where", "loc == 7", "--json").output)
    assert plan["total_files"] == 3 and plan["planned"] == 2 and len(plan["files"]) == 2
    assert plan["planned_partitions"] == 2


def test_read_with_or_and_csv(store):
    code, out = run("read", store, "sales", "--where", "loc == 1", "--or", "--where", "v >= 4", "--format", "csv")
    assert code == 0
    got = pd.read_csv(io.StringIO(out))
    assert sorted(got["loc"]) == [1, 3]


def test_read_json_has_iso_dates_and_nulls(tmp_path):
    import datetime as dt

    df = pd.DataFrame({"p": [1, 2], "d": [dt.date(2024, 1, 2), dt.date(2024, 3, 4)], "x": [1.5, float("nan")],
                       "t": pd.to_datetime(["2024-01-02 03:04:05", "2024-01-02 00:00:00"])})
    kstore.store_dataset(str(tmp_path), "ds", df, partition_on="p")
    res = invoke("read", str(tmp_path), "ds", "--json")
    rows = sorted(json.loads(res.output), key=lambda r: r["p"])
    assert rows[0]["d"] == "2024-01-02" and rows[1]["d"] == "2024-03-04"  # dates, not epoch numbers
    assert rows[0]["t"] == "2024-01-02T03:04:05" and rows[1]["x"] is None
    assert json.loads(invoke("read", str(tmp_path), "ds", "--format", "json").output) == json.loads(res.output)


def test_read_limit_reads_only_the_files_it_needs(tmp_path, monkeypatch):
    df = pd.DataFrame({"p": list(range(10)), "x": list(range(10))})
    kstore.store_dataset(str(tmp_path), "ds", df, partition_on="p")
    opened: list[str] = []
    real_open, real_native, real_get = LocalStore.open, LocalStore.open_native, LocalStore.get

    def spy_open(self, key):
        opened.append(key)
        return real_open(self, key)

    def spy_native(self, key):
        opened.append(key)
        return real_native(self, key)

    def spy_get(self, key):
        opened.append(key)
        return real_get(self, key)

    monkeypatch.setattr(LocalStore, "open", spy_open)
    monkeypatch.setattr(LocalStore, "open_native", spy_native)
    monkeypatch.setattr(LocalStore, "get", spy_get)
    res = invoke("read", str(tmp_path), "ds", "--limit", "1", "--json")
    assert len(json.loads(res.output)) == 1
    data_files = {k for k in opened if k.endswith(".parquet") and "/table/" in k}
    assert len(data_files) == 1, data_files
    opened.clear()
    assert len(json.loads(invoke("read", str(tmp_path), "ds", "--limit", "0", "--json").output)) == 10
    assert len({k for k in opened if k.endswith(".parquet") and "/table/" in k}) == 10
    human = invoke("read", str(tmp_path), "ds", "--limit", "3").output
    assert "(3 rows; more not read" in human


def test_bad_column_is_a_clear_error(store, capsys):
    code, _ = run("read", store, "sales", "--where", "nope == 1")
    assert code == 1  # deliberately changed from 2: 2 is now only click's usage errors
    err = capsys.readouterr().err
    assert "'nope'" in err and "Traceback" not in err


def test_history_gc_build_indices_delete(store):
    res = invoke("build-indices", store, "sales", "v")
    assert res.exit_code == 0 and "indices ['loc', 'v']" in res.output
    hist = json.loads(invoke("history", store, "sales", "--json").output)
    assert [h["operation"] for h in hist["versions"]] == ["create", "build_indices"] and hist["versioned"]
    assert hist["versions"][0]["timestamp"].startswith("20") and "T" in hist["versions"][0]["timestamp"]
    assert "build_indices" in invoke("history", store, "sales").output
    newest = json.loads(invoke("history", store, "sales", "--limit", "1", "--json").output)
    assert [h["operation"] for h in newest["versions"]] == ["build_indices"]
    old = kstore.load_metadata(store, "sales")
    dropped = [k for lab, f in old.partitions.items() if lab.startswith("day=a/") for k in f.values()]
    kstore.update_dataset(store, "sales", delete_scope=[{"day": "a"}])
    code, out = run("gc", store, "sales", "--retention-days", "0", "--dry-run", "--allow-short-retention")
    assert code == 0 and out.startswith("would delete 4 files")  # day=a file, old loc + v indices, old stats
    assert kstore.open_store(store).exists(dropped[0])
    # deliberately changed: without --yes a non-interactive gc refuses and says how much it would delete
    res = CliRunner().invoke(cli, ["gc", store, "sales", "--retention-days", "0", "--allow-short-retention"])
    assert res.exit_code == 1 and "4 files" in res.output and "--yes" in res.output
    assert kstore.open_store(store).exists(dropped[0])
    code, out = run("gc", store, "sales", "--retention-days", "0", "--allow-short-retention", "--yes")
    assert code == 0 and out.startswith("deleted 4 files, expired versions [0, 1]")
    assert not kstore.open_store(store).exists(dropped[0])
    # the expired versions stay in history for the log retention (--log-retention-days, 30 by default)
    hist = json.loads(invoke("history", store, "sales", "--json").output)["versions"]
    assert [(h["version"], h["expired"]) for h in hist][:2] == [(0, True), (1, True)]
    assert "create (expired)" in invoke("history", store, "sales").output
    code, out = run("gc", store, "sales", "--retention-days", "0", "--allow-short-retention", "--yes",
                    "--log-retention-days", "0")
    assert code == 0  # (the tombstones are younger than an hour: they stay until then)
    code, out = run("delete", store, "sales", "--yes")
    assert code == 0 and out.startswith("deleted ")
    code, out = run("ls", store)
    assert out.strip() == ""


def test_delete_dry_run_and_refusal(store):
    keys = sorted(LocalStore(store).iter_prefix(""))
    res = invoke("delete", store, "sales", "--dry-run")
    n = int(res.output.split()[2])
    assert res.exit_code == 0 and res.output.startswith("would delete") and n >= 6
    res = CliRunner().invoke(cli, ["delete", store, "sales"])  # not a terminal, no --yes
    assert res.exit_code == 1 and f"({n} keys)" in res.output and "--yes" in res.output
    res = CliRunner().invoke(cli, ["delete", store, "sales"], input="n\n")
    assert res.exit_code == 1
    assert sorted(LocalStore(store).iter_prefix("")) == keys  # nothing deleted by any of these
    res = invoke("delete", store, "sales", "--yes")
    assert res.output.startswith("deleted")
    assert invoke("ls", store).output.strip() == ""


def test_stats_and_diff(store):
    s = json.loads(invoke("stats", store, "sales", "--json", "--files").output)
    assert s["files"] == 3 and s["rows"] == 4 and len(s["per_file"]) == 3
    cols = {c["column"]: c for c in s["columns"]}
    assert cols["loc"]["min"] == 1 and cols["loc"]["max"] == 7 and cols["v"]["nulls"] == 0
    assert "loc" in invoke("stats", store, "sales").output
    kstore.update_dataset(store, "sales", pd.DataFrame({"day": ["d", "d"], "loc": [5, 6], "v": [0.0, 0.5]}))
    kstore.update_dataset(store, "sales", delete_scope=[{"day": "a"}])
    d = json.loads(invoke("diff", store, "sales", "0", "2", "--json").output)
    assert len(d["added"]) == 1 and d["added"][0].startswith("day=d/") and d["rows_added"] == 2
    assert len(d["removed"]) == 1 and d["removed"][0].startswith("day=a/") and d["rows_removed"] == 2
    human = invoke("diff", store, "sales", "0", "2").output
    assert "+1 file (2 rows), -1 file (2 rows)" in human  # deliberately changed (#30): they are files
    res = CliRunner().invoke(cli, ["diff", store, "sales", "0", "9"])
    assert res.exit_code == 1 and "9" in res.output


def test_copy(store, tmp_path):
    target = str(tmp_path / "other")
    res = invoke("copy", store, "sales", "--to", target, "--as", "sales2")
    assert res.exit_code == 0 and "'sales2'" in res.output
    assert kstore.read_dataset(target, "sales2").sort_values("v")["v"].tolist() == [1.0, 2.0, 3.0, 4.0]
    res = CliRunner().invoke(cli, ["copy", store, "sales"])
    assert res.exit_code == 1 and "--to" in res.output
    res = CliRunner().invoke(cli, ["copy", store, "sales", "--to", target, "--as", "sales2"])
    assert res.exit_code == 1 and "already exists" in res.output


def test_copy_never_prints_the_credentials_of_the_target(store):
    target = "memory://user:S3CR3T-xyz@cli-copy-target"
    res = invoke("copy", store, "sales", "--to", target, "--as", "sales2")
    assert res.exit_code == 0 and "in memory://***@cli-copy-target" in res.output
    assert "S3CR3T" not in res.output
    res = CliRunner().invoke(cli, ["copy", store, "sales", "--to", target, "--as", "sales2"])
    assert res.exit_code == 1 and "already exists" in res.output and "S3CR3T" not in res.output


def test_history_of_a_plateau_dataset_says_there_is_none(tmp_path):
    import functools

    import minimalkv
    from plateau.api.dataset import store_dataframes_as_dataset

    df = pd.DataFrame({"p": [1, 2], "x": [3, 4]})
    store_dataframes_as_dataset(store=functools.partial(minimalkv.get_store_from_url, f"hfs://{tmp_path}"),
                                dataset_uuid="legacy", dfs=[df], partition_on=["p"])
    res = invoke("history", str(tmp_path), "legacy")
    assert res.exit_code == 0
    assert "no version history" in res.output and "kartothek/plateau" in res.output
    assert "2 files in 2 partitions" in res.output  # deliberately changed (#30): files and partitions apart
    data = json.loads(invoke("history", str(tmp_path), "legacy", "--json").output)
    assert data == {"dataset": "legacy", "versioned": False, "files": 2, "partitions": 2, "versions": []}


def test_parse_where_literals():
    assert parse_where(["d >= 2024-01-02", "s == 'x y'", "n not in [1, 2]"]) == [
        [("d", ">=", "2024-01-02"), ("s", "==", "x y"), ("n", "not in", [1, 2])]
    ]
    with pytest.raises(kstore.KstoreError, match="cannot parse"):
        parse_where(["just-a-word"])


def test_a_mistyped_store_is_an_error_and_nothing_is_created(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for argv in (["ls", "typo"], ["info", "typo", "sales"], ["read", "typo", "sales"], ["history", "typo", "sales"],
                 ["plan", "typo", "sales"], ["stats", "typo", "sales"], ["diff", "typo", "sales", "0", "1"],
                 ["copy", "typo", "sales", "--to", "typo2"], ["ls", "file://localhost/typo/x"]):
        code, out = run(*argv)
        assert code == 1 and out == "", argv  # deliberately changed from 2 (now: usage errors only)
        assert "typo" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("days", ["1e12", "nan", "-1", "inf"])
def test_gc_retention_out_of_range_is_a_usage_error(store, days):
    res = CliRunner().invoke(cli, ["gc", store, "sales", "--retention-days", days])
    assert res.exit_code == 2
    assert "--retention-days" in res.output
    assert len(kstore.history(store, "sales")) == 1


def test_progress_store_reports_deletes(store, monkeypatch):
    from kstore.cli import _common

    ticks: list[int] = []
    monkeypatch.setattr(_common, "progress_enabled", lambda: True)
    real = _common.progress

    class Spy:
        def __init__(self, description, total):
            self.cm = real(description, total)
            ticks.append(total)

        def __enter__(self):
            advance = self.cm.__enter__()
            return lambda: (ticks.append(-1), advance())

        def __exit__(self, *exc):
            return self.cm.__exit__(*exc)

    import kstore.cli.maintain as maintain

    monkeypatch.setattr(maintain, "progress", Spy)
    n = int(invoke("delete", store, "sales", "--dry-run").output.split()[2])
    res = invoke("delete", store, "sales", "--yes")
    assert res.exit_code == 0
    assert ticks[0] == n and ticks.count(-1) >= n  # one tick per deleted key


# -- real processes ---------------------------------------------------------------------------


def _proc(*argv: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "kstore", *argv], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=env, stdin=subprocess.DEVNULL)


def test_subprocess_version_and_exit_codes(store, tmp_path):
    res = _proc("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"kstore {kstore.__version__}"
    res = _proc("info", store, "sales", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["dataset"] == "sales"
    res = _proc("info", store, "missing")
    assert res.returncode == 1 and "'missing'" in res.stderr and "Traceback" not in res.stderr
    res = _proc("read", store, "sales", "--no-such-option")
    assert res.returncode == 2 and "No such option" in res.stderr
    res = _proc("delete", store, "sales")  # stdin is not a terminal: refuses
    assert res.returncode == 1 and "--yes" in res.stderr
    assert kstore.load_metadata(store, "sales").uuid == "sales"


def test_console_script_is_installed():
    script = Path(sys.executable).with_name("kstore")
    res = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.startswith("kstore ")


@pytest.mark.parametrize("mb", ["nan", "NaN", "inf", "-inf", "1e400", "-1", "0", "1e-9", "big"])
def test_compact_target_mb_that_is_no_size_is_a_usage_error(tmp_path, capsys, mb):
    url = str(tmp_path / "st")
    for i in range(2):
        df = pd.DataFrame({"p": [1], "x": [i]})
        (kstore.update_dataset(url, "c", df) if i else kstore.store_dataset(url, "c", df, partition_on=["p"]))
    res = CliRunner().invoke(cli, ["compact", url, "c", f"--target-mb={mb}"])
    assert res.exit_code == 2, (res.output, res.exception)
    assert "--target-mb" in res.output and "not a size in MiB" in res.output and "Traceback" not in res.output
    code, out = run("compact", url, "c", f"--target-mb={mb}")
    err = capsys.readouterr().err
    assert code == 2 and out == "" and "--target-mb" in err and "Traceback" not in err
    assert kstore.load_metadata(url, "c").version == 1  # nothing committed
    assert invoke("compact", url, "c", "--target-mb", "0.5").exit_code == 0
    assert kstore.load_metadata(url, "c").version == 2


def test_compact_dry_run_then_merge(tmp_path):
    url = str(tmp_path / "st")
    for i in range(4):
        df = pd.DataFrame({"p": [1, 2], "x": [i, 10 + i]})
        (kstore.update_dataset(url, "c", df) if i else kstore.store_dataset(url, "c", df, partition_on=["p"]))
    before = kstore.load_metadata(url, "c")
    res = invoke("compact", url, "c", "--dry-run", "--json")
    got = json.loads(res.output)
    assert got["dry_run"] and got["files_in"] == 8 and got["files_out"] == 2 and got["version"] is None
    assert kstore.load_metadata(url, "c").version == before.version  # nothing committed
    res = invoke("compact", url, "c", "--where", "p == 1")
    assert res.exit_code == 0 and "merged 4 files into 1 in 1 partition(s): version 4" in res.output
    after = kstore.load_metadata(url, "c")
    assert len(after.partitions) == 5  # p=1 merged, p=2 untouched
    assert sorted(kstore.read_dataset(url, "c")["x"]) == sorted([0, 1, 2, 3, 10, 11, 12, 13])
    res = invoke("compact", url, "c", "--where", "p == 1")
    assert "nothing to compact" in res.output
    bad = CliRunner().invoke(cli, ["compact", url, "c", "--where", "p"])
    # deliberately changed (#30): a --where that cannot be parsed is a usage error (2), no longer 1
    assert bad.exit_code == 2 and "column op value" in bad.output and "--where" in bad.output


def test_a_real_terminal_gets_progress_bars_and_a_pipe_does_not(tmp_path):
    """``kstore compact`` in a real subprocess whose stderr is a pseudo-terminal draws rich's
    bar there (its description and an ``n/m`` count); with stderr a pipe, nothing of it."""
    import pty
    import select

    url = str(tmp_path / "st")
    for i in range(4):
        df = pd.DataFrame({"p": [1, 2], "x": [i, 10 + i]})
        (kstore.update_dataset(url, "c", df) if i else kstore.store_dataset(url, "c", df, partition_on=["p"]))
    piped = _proc("compact", url, "c", "--dry-run")
    assert piped.returncode == 0 and "compact c" not in piped.stderr

    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONWARNINGS="ignore", TERM="xterm-256color", COLUMNS="100")
    env.pop("CI", None)  # rich treats CI as a dumb terminal
    proc = subprocess.Popen([sys.executable, "-m", "kstore", "compact", url, "c"], stdout=subprocess.PIPE,
                            stderr=slave, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=120)
    os.close(master)
    assert proc.returncode == 0, seen[-2000:]
    assert b"merged 8 files into 2" in out
    text = seen.decode("utf-8", "replace")
    assert "compact c" in text and "2/2" in text, text[-2000:]


def test_restore_brings_back_an_older_version(store):
    before = kstore.read_dataset(store, "sales")
    kstore.update_dataset(store, "sales", delete_scope=[{"day": "a"}])
    res = invoke("restore", store, "sales", "--version", "0")
    assert res.exit_code == 0 and res.output.strip() == "version 2: restores version 0"
    got = kstore.read_dataset(store, "sales")
    assert sorted(got["v"]) == sorted(before["v"])
    assert invoke("restore", store, "sales", "--version", "2").output.strip() == (
        "version 2 is the newest version already: nothing to restore")
    code, _ = run("restore", store, "sales")
    assert code != 0
    code, _ = run("restore", store, "sales", "--version", "9")
    assert code == 1
