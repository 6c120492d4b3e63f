"""Issue #30 on the command line: the ``--where`` grammar (operators without spaces, ``and`` /
``or``, quoted strings, lists), option defaults in the reference (no ``Sentinel.UNSET``), and
the words of the output (a partition is a partition value; it holds files; a compaction adds
no rows)."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import subprocess
import sys

import click
import pandas as pd
import pytest
from click.testing import CliRunner

import kstore
from kstore.cli import cli, main, parse_where


@pytest.fixture
def store(tmp_path):
    """30 rows in 3 partitions (p), one file each."""
    n = 30
    df = pd.DataFrame({
        "p": [i % 3 for i in range(n)],
        "id": list(range(n)),
        "location": [7 if i % 4 == 0 else 8 + i % 5 for i in range(n)],
        "qty": [i % 7 for i in range(n)],
        "name": [["a", "b", "c", "x y", "d"][i % 5] for i in range(n)],
        "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % 6) for i in range(n)],
    })
    url = str(tmp_path / "st")
    kstore.store_dataset(url, "sales", df, partition_on=["p"])
    return url


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def cli_ids(store: str, *where: str) -> list[int]:
    argv = ["read", store, "sales", "--format", "json", "--limit", "0", "--columns", "id"]
    for w in where:
        argv += ["--or"] if w == "--or" else ["--where", w]
    code, out = run(*argv)
    assert code == 0, (where, out)
    return sorted(r["id"] for r in json.loads(out))


def api_ids(store: str, predicates: list) -> list[int]:
    return sorted(kstore.read_dataset(store, "sales", columns=["id"], predicates=predicates)["id"].tolist())


D = dt.date
WHERE_FORMS = [
    (["location==7"], [[("location", "==", 7)]]),
    (["location == 7 and qty > 3"], [[("location", "==", 7), ("qty", ">", 3)]]),
    (["location==7 and qty>3"], [[("location", "==", 7), ("qty", ">", 3)]]),
    (["location!=7"], [[("location", "!=", 7)]]),
    (["qty<=2 AND location>=9"], [[("qty", "<=", 2), ("location", ">=", 9)]]),
    (["qty<2"], [[("qty", "<", 2)]]),
    (["location == 7 and qty > 3 or name == 'b'"], [[("location", "==", 7), ("qty", ">", 3)], [("name", "==", "b")]]),
    (["qty == 1 or qty == 2 Or qty == 6"], [[("qty", "==", 1)], [("qty", "==", 2)], [("qty", "==", 6)]]),
    (["name == \"x y\""], [[("name", "==", "x y")]]),
    (["name=='x y' and p in [1, 2]"], [[("name", "==", "x y"), ("p", "in", [1, 2])]]),
    (["location in (7, 8, 9)"], [[("location", "in", [7, 8, 9])]]),
    (["name in ['a','b']"], [[("name", "in", ["a", "b"])]]),
    (["name in[a, d]"], [[("name", "in", ["a", "d"])]]),
    (["qty not in [1, 2, 3]"], [[("qty", "not in", [1, 2, 3])]]),
    (["day >= 2024-01-04"], [[("day", ">=", D(2024, 1, 4))]]),
    (["day in [2024-01-02, 2024-01-05] and qty>=1"], [[("day", "in", [D(2024, 1, 2), D(2024, 1, 5)]), ("qty", ">=", 1)]]),
    # several --where are ANDed: an 'or' inside one is distributed over the others
    (["qty == 1 or qty == 2", "location == 7"], [[("qty", "==", 1), ("location", "==", 7)],
                                                [("qty", "==", 2), ("location", "==", 7)]]),
    # the forms that worked before: one term per --where, --or between conjunctions
    (["location == 7", "--or", "qty >= 6"], [[("location", "==", 7)], [("qty", ">=", 6)]]),
    (["location in [7, 8]", "qty = 3"], [[("location", "in", [7, 8]), ("qty", "==", 3)]]),
    (["name is not null", "name != 'a'"], [[("name", "is not null"), ("name", "!=", "a")]]),
]


@pytest.mark.parametrize(("where", "predicates"), WHERE_FORMS, ids=[" | ".join(w) for w, _ in WHERE_FORMS])
def test_where_forms_read_the_rows_the_api_reads(store, where, predicates):
    expected = api_ids(store, predicates)
    assert 0 < len(expected) < 30, "the predicate must select some rows, not all"
    assert cli_ids(store, *where) == expected


def test_where_is_parsed_into_the_dnf_the_api_takes():
    assert parse_where(["location==7 and qty > 3"]) == [[("location", "==", 7), ("qty", ">", 3)]]
    assert parse_where(["a < 1 or b > 2 and c == 'x'"]) == [[("a", "<", 1)], [("b", ">", 2), ("c", "==", "x")]]
    assert parse_where(["n in (1, 2, 3)", "s in ['a', \"b\"]"]) == [[("n", "in", [1, 2, 3]), ("s", "in", ["a", "b"])]]
    assert parse_where(["t >= 2024-01-02 10:00:00 and `odd col` is null"]) == [
        [("t", ">=", "2024-01-02 10:00:00"), ("odd col", "is null")]]
    assert parse_where(["s == 'rock and roll' or s == \"a or b\""]) == [[("s", "==", "rock and roll")],
                                                                       [("s", "==", "a or b")]]


BAD_WHERE = ["location", "location ==", "location == 7 and", "name == 'abc", "location in [1, 2",
             "location == 7 qty > 3", "location =< 3", "or location == 7", "location in [1,,2]", "x == " + "[" * 300]


@pytest.mark.parametrize("where", BAD_WHERE)
def test_a_where_that_cannot_be_parsed_is_a_usage_error(store, capsys, where):
    for command in ("read", "plan", "compact"):
        code, out = run(command, store, "sales", "--where", where)
        err = capsys.readouterr().err
        assert code == 2 and out == "", (command, where, code, err)
        assert "--where" in err and "cannot parse" in err and "Traceback" not in err
        assert where[:20] in err  # names the text
    res = CliRunner().invoke(cli, ["read", store, "sales", "--where", where])
    assert res.exit_code == 2 and "cannot parse --where" in res.output and res.exception is not None
    assert isinstance(res.exception, SystemExit)  # click's usage error, not a crash
    assert kstore.load_metadata(store, "sales").version == 0  # compact committed nothing


def test_a_value_of_the_wrong_type_is_still_an_error_kstore_reports(store, capsys):
    code, out = run("read", store, "sales", "--where", "location == abc")
    err = capsys.readouterr().err
    assert code == 1 and out == "" and "'abc'" in err and "location" in err and "Traceback" not in err


def test_a_real_process_gets_no_traceback_for_a_bad_where(store):
    res = subprocess.run([sys.executable, "-m", "kstore", "read", store, "sales", "--where", "location == 7 and"],
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "'location == 7 and'" in res.stderr


# -- option defaults ---------------------------------------------------------------------------


def all_commands() -> list[tuple[str, click.Command]]:
    assert isinstance(cli, click.Group)
    return [("", cli), *sorted(cli.commands.items())]


@pytest.mark.parametrize("name", [n for n, _ in all_commands()])
def test_help_shows_no_sentinel(name):
    res = CliRunner().invoke(cli, [*([name] if name else []), "--help"])
    assert res.exit_code == 0 and "Usage:" in res.output
    assert "Sentinel" not in res.output and "UNSET" not in res.output


def test_every_option_has_a_real_default():
    for name, command in all_commands():
        ctx = click.Context(command, info_name=name or "kstore")
        for param in command.get_params(ctx):
            if isinstance(param, click.Option):
                assert "Sentinel" not in repr(param.default), (name, param.name, param.default)


def test_the_generated_reference_shows_no_sentinel():
    docs = pytest.importorskip("mkdocs_click._docs")
    text = "\n".join(docs.make_command_docs(prog_name="kstore", command=cli, depth=1, style="table",
                                            list_subcommands=True))
    assert "kstore read" in text and "--where" in text
    assert "Sentinel" not in text and "UNSET" not in text
    assert re.search(r"`--json` \| boolean \| [^|]* \| `False` \|", text)


# -- words -------------------------------------------------------------------------------------


def row(output: str, key: str) -> str:
    """The value of ``key`` in ``kstore info``'s table."""
    m = re.search(rf"^\s*{re.escape(key)}\s+(.*?)\s*$", output, re.MULTILINE)
    assert m, (key, output)
    return m.group(1)


def test_info_counts_files_and_partitions_apart(tmp_path):
    url = str(tmp_path / "st")
    for i in range(4):  # 4 files in each of 5 partitions
        df = pd.DataFrame({"p": list(range(5)), "x": [i] * 5})
        (kstore.update_dataset(url, "d", df) if i else kstore.store_dataset(url, "d", df, partition_on=["p"]))
    human = CliRunner().invoke(cli, ["info", url, "d"]).output
    assert row(human, "files") == "20" and row(human, "partitions") == "5"
    data = json.loads(CliRunner().invoke(cli, ["info", url, "d", "--json"]).output)
    assert data["files"] == 20 and data["partitions"] == 5
    stats = CliRunner().invoke(cli, ["stats", url, "d"]).output
    assert "20 files in 5 partitions, 20 rows" in stats
    kstore.store_dataset(url, "flat", pd.DataFrame({"x": [1, 2]}))  # no partition keys: no partitions
    human = CliRunner().invoke(cli, ["info", url, "flat"]).output
    assert row(human, "files") == "1" and row(human, "partitions") == "- (not partitioned)"
    assert json.loads(CliRunner().invoke(cli, ["info", url, "flat", "--json"]).output)["partitions"] == 0


def test_history_shows_no_rows_added_by_a_compaction(tmp_path):
    url = str(tmp_path / "st")
    for i in range(4):  # 8 files of one row in 2 partitions
        df = pd.DataFrame({"p": [1, 2], "x": [i, 10 + i]})
        (kstore.update_dataset(url, "c", df) if i else kstore.store_dataset(url, "c", df, partition_on=["p"]))
    kstore.compact(url, "c")
    assert kstore.history(url, "c")[-1].rows_added == 8  # the library counts the rows it wrote
    human = CliRunner().invoke(cli, ["history", url, "c"]).output
    header = next(line for line in human.splitlines() if "operation" in line).split()
    assert header[:8] == ["version", "timestamp", "operation", "files", "+files", "-files", "rows", "added"]
    lines = {line.split()[2]: line.split() for line in human.splitlines() if re.match(r"^\s*\d+\s", line)}
    assert lines["compaction"][3:7] == ["2", "2", "8", "-"]  # files after, +files, -files, rows added
    assert "merged 8 files into 2 (8 rows rewritten)" in human
    assert lines["append"][6] == "2" and lines["create"][6] == "2"
    data = json.loads(CliRunner().invoke(cli, ["history", url, "c", "--json"]).output)
    last = data["versions"][-1]
    assert last["operation"] == "compaction" and last["rows_added"] == 0 and last["rows_rewritten"] == 8
    assert last["files"] == 2 and last["info"]["files_in"] == 8 and last["info"]["files_out"] == 2
    assert [v["rows_added"] for v in data["versions"][:-1]] == [2, 2, 2, 2]
