"""Hostile arguments to every public function, on a memory and a local directory store.

Each case calls one public function with arguments drawn from valid values, near misses and
values of the wrong type; it must return or raise a ``KstoreError``, touch only keys of the
datasets it names, leave the store unchanged when it is a read or a failed write, never
touch the sentinel dataset, and leave the dataset readable. A second test gives the read
functions hostile *stores* (paths, URLs, objects) and checks that nothing is created.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import shutil
import uuid as _uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kstore
from kstore.core import naming
from kstore.errors import KstoreError
from kstore.io.local import LocalStore
from kstore.io.memory import MemoryStore
from kstore.io.store import CountingStore
from tests.fuzz._harness import (
    HOSTILE_ARRAYS,
    SENTINEL,
    SPECIAL_STRINGS,
    VALUES,
    _frame,
    _owned,
    _sentinel,
    fuzz_settings,
    hostile_array,
)

UUID = "ds"

# -- argument strategies --------------------------------------------------------------------------

ODD_OBJECTS = [
    object(), b"bytes", bytearray(b"x"), float("nan"), float("inf"), 10**30, -1, 0, True, pd.NaT, np.nan,
    dt.date(2024, 1, 1), dt.datetime(2024, 1, 1), dt.timedelta(days=-1), dt.timedelta.max, set(), frozenset({1}),
    range(3), np.int64(3), np.array([1, 2]), pd.Series([1]), pd.DataFrame(), pa.array([1]), Ellipsis, int,
    Exception("x"), Decimal("1.5"), 1 + 2j, "\ud800",
]
HOSTILE = st.one_of(VALUES, st.sampled_from(ODD_OBJECTS))
COLUMNS = ["p", "x", "s", "v", "d", "t", "n", "f", "nope", "", "€" * 40, "__index_level_0__"]
NAMES = st.sampled_from(COLUMNS)
UUIDS = st.sampled_from([UUID, "new", "new.2", "a" * 230, "../x", "x/y", "ds\n", "", SENTINEL + "2"])
OPS = ["==", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null", "=", "like", "", None]
LITERALS = st.one_of(st.integers(-5, 40), st.text(max_size=4), st.floats(allow_nan=True), st.none(),
                     st.dates(dt.date(2023, 12, 1), dt.date(2024, 2, 1)), st.sampled_from(ODD_OBJECTS))


@st.composite
def terms(draw) -> tuple:
    col, op = draw(NAMES), draw(st.sampled_from(OPS))
    if op in ("in", "not in"):
        return (col, op, draw(st.lists(LITERALS, max_size=4)))
    if op in ("is null", "is not null") and draw(st.booleans()):
        return (col, op)
    return (col, op, draw(LITERALS))


PREDICATES = st.one_of(
    st.lists(st.lists(terms(), min_size=1, max_size=3), max_size=3),
    st.lists(terms(), min_size=1, max_size=3),
    st.builds(lambda n: [[("x", ">", -i) for i in range(n)]], st.sampled_from([1025, 5000])),  # beyond the limit
)


@st.composite
def frames(draw) -> Any:
    n = draw(st.integers(0, 5))
    cols = draw(st.lists(NAMES, min_size=1, max_size=5))
    pools = {
        "int": st.integers(-3, 3), "big": st.integers(-(2**70), 2**70), "str": st.text(max_size=3),
        "bytes": st.binary(max_size=3), "float": st.floats(allow_nan=True), "date": st.dates(),
        "none": st.none(), "mixed": st.one_of(st.integers(), st.text(max_size=2), st.binary(max_size=2)),
        "list": st.lists(st.integers(-3, 3), max_size=2), "odd": st.sampled_from(ODD_OBJECTS),
    }
    data = {}
    for c in cols:
        pool = pools[draw(st.sampled_from(sorted(pools)))]
        data[c] = draw(st.lists(pool, min_size=n, max_size=n))
    try:
        df = pd.DataFrame({c: pd.Series(v, dtype=object) for c, v in data.items()})
    except Exception:  # pandas itself refuses
        df = pd.DataFrame({"x": [1]})
    if draw(st.booleans()):
        df = df.rename(columns=dict(zip(df.columns, draw(st.lists(NAMES, min_size=len(df.columns),
                                                                    max_size=len(df.columns))))))
    return df


def _good_frame(offset: int) -> pd.DataFrame:
    return _frame(offset).drop(columns=["t", "n"])


DATA = st.one_of(
    st.builds(_good_frame, st.integers(0, 30)),
    frames(),
    st.builds(lambda k: [_good_frame(k), _good_frame(k + 6)], st.integers(0, 30)),
    st.builds(lambda k: pa.Table.from_pandas(_good_frame(k), preserve_index=False), st.integers(0, 30)),
    st.builds(lambda kinds, names, n: pa.table({c: hostile_array(k, n) for c, k in zip(names, kinds)}),
              st.lists(st.sampled_from(HOSTILE_ARRAYS), min_size=1, max_size=4),
              st.lists(NAMES, min_size=4, max_size=4, unique=True), st.integers(0, 4)),
    HOSTILE,
)
TIMES = st.one_of(st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1)), st.text(max_size=30),
                  st.sampled_from(["2024-01-01", "2024-01-01T00:00:00+05:00", "yesterday", "9999-12-31T23:59:59"]))

PARAMS: dict[str, st.SearchStrategy] = {
    "dataset_uuid": UUIDS,
    "new_uuid": UUIDS,
    "data": DATA,
    "partition_on": st.one_of(NAMES, st.lists(NAMES, max_size=3)),
    "secondary_indices": st.one_of(NAMES, st.lists(NAMES, max_size=3)),
    "columns": st.one_of(st.lists(NAMES, max_size=3), NAMES),
    "categoricals": st.one_of(st.lists(NAMES, max_size=2), NAMES),
    "predicates": PREDICATES,
    "metadata": st.dictionaries(
        st.one_of(st.text(max_size=5), st.integers(), st.sampled_from([(1, 2), b"k", None, frozenset({1}), 1.5])),
        st.one_of(VALUES, st.sampled_from(ODD_OBJECTS), st.integers(2**63, 2**70)), max_size=3),
    "metadata_format": st.sampled_from(["json", "msgpack.zstd", "yaml"]),
    "table_name": st.sampled_from(["table", "other", "t" * 300, "../t"]),
    "table": st.sampled_from(["table", "other", None]),
    "overwrite": st.booleans(),
    "txn": st.tuples(st.sampled_from(["app", ""]), st.integers(-1, 3)),
    "delete_scope": st.lists(st.dictionaries(NAMES, LITERALS, max_size=2), max_size=2),
    "mode": st.sampled_from(["append", "overwrite_partitions", "overwrite", "error"]),
    "schema_mode": st.sampled_from(["strict", "merge", "loose"]),
    "as_arrow": st.booleans(),
    "dates_as_object": st.booleans(),
    "version": st.integers(-1, 4),
    "as_of": TIMES,
    "retention": st.one_of(st.timedeltas(), st.sampled_from([dt.timedelta(0), dt.timedelta.max])),
    "dry_run": st.booleans(),
    "from_version": st.integers(-1, 4),
    "to_version": st.integers(-1, 4),
    "column": NAMES,
    "value": LITERALS,
    "columns_to_index": st.one_of(st.lists(NAMES, max_size=2), NAMES, st.none()),
    "renames": st.one_of(st.dictionaries(NAMES, NAMES, max_size=2), NAMES, st.none()),
    "columns_to_drop": st.one_of(st.lists(NAMES, max_size=2), NAMES, st.none()),
}

FUNCTIONS: dict[str, tuple[Any, list[str], bool]] = {  # name -> (function, parameters, writes)
    "store_dataset": (kstore.store_dataset, ["dataset_uuid", "data", "partition_on", "secondary_indices", "metadata",
                                             "metadata_format", "table_name", "overwrite", "txn"], True),
    "update_dataset": (kstore.update_dataset, ["dataset_uuid", "data", "delete_scope", "partition_on",
                                               "secondary_indices", "metadata", "mode", "schema_mode", "txn"], True),
    "read_dataset": (kstore.read_dataset, ["dataset_uuid", "columns", "predicates", "as_arrow", "categoricals",
                                           "dates_as_object", "version", "as_of", "table"], False),
    "read_table": (kstore.read_table, ["dataset_uuid", "columns", "predicates", "version", "as_of", "table"], False),
    "iter_dataset": (lambda *a, **k: list(kstore.iter_dataset(*a, **k)),
                     ["dataset_uuid", "columns", "predicates", "as_arrow", "categoricals", "dates_as_object", "version",
                      "as_of"], False),
    "plan_read": (kstore.plan_read, ["dataset_uuid", "predicates", "columns", "version", "as_of", "table"], False),
    "load_metadata": (kstore.load_metadata, ["dataset_uuid", "version"], False),
    "read_schema": (kstore.read_schema, ["dataset_uuid", "version"], False),
    "index_lookup": (kstore.index_lookup, ["dataset_uuid", "column", "value"], False),
    "history": (kstore.history, ["dataset_uuid"], False),
    "diff": (kstore.diff, ["dataset_uuid", "from_version", "to_version"], False),
    "resolve_version": (kstore.lifecycle.resolve_version, ["dataset_uuid", "version", "as_of"], False),
    "build_indices": (kstore.build_indices, ["dataset_uuid", "columns_to_index"], True),
    "delete_rows": (kstore.delete_rows, ["dataset_uuid", "predicates"], True),
    "rename_columns": (kstore.rename_columns, ["dataset_uuid", "renames", "txn"], True),
    "drop_columns": (kstore.drop_columns, ["dataset_uuid", "columns_to_drop", "txn"], True),
    "garbage_collect": (kstore.garbage_collect, ["dataset_uuid", "retention", "dry_run"], True),
    "copy_dataset": (kstore.copy_dataset, ["dataset_uuid", "new_uuid"], True),
    "upgrade_dataset": (kstore.upgrade_dataset, ["dataset_uuid"], True),
}
REQUIRED = {"dataset_uuid", "data", "column", "value", "from_version", "to_version", "columns_to_index", "renames",
            "columns_to_drop"}
POSITIONAL = {"dataset_uuid": 0, "data": 1, "column": 1, "value": 2, "from_version": 1, "to_version": 2,
              "columns_to_index": 1, "renames": 1, "columns_to_drop": 1}


@st.composite
def calls(draw) -> tuple[str, list, dict]:
    name = draw(st.sampled_from(sorted(FUNCTIONS)))
    _, params, _ = FUNCTIONS[name]
    args: list = []
    kwargs: dict = {}
    for p in params:
        choice = draw(st.sampled_from(["valid", "valid", "valid", "hostile", "omit"]))
        if choice == "omit" and p not in REQUIRED and not (name == "delete_rows" and p == "predicates"):
            continue
        value = draw(PARAMS[p]) if choice != "hostile" else draw(HOSTILE)
        if p in POSITIONAL:
            args.append(value)
        else:
            kwargs[p] = value
    return name, args, kwargs


# -- the base store ---------------------------------------------------------------------------------


def _base_files() -> dict[str, bytes]:
    store = MemoryStore()
    kstore.store_dataset(store, UUID, _good_frame(0), partition_on="p", secondary_indices=["x"])
    kstore.update_dataset(store, UUID, _good_frame(6))
    _sentinel(store)
    return dict(store._data)


BASE = _base_files()


class Snapshot:
    """The store's keys and bytes (a local store's directories too)."""

    def __init__(self, inner: Any, root: Path | None) -> None:
        self.inner, self.root = inner, root

    def take(self) -> dict[str, Any]:
        if self.root is None:
            return dict(self.inner._data)
        out: dict[str, Any] = {}
        for d, dirs, files in os.walk(self.root):
            dirs[:] = [x for x in dirs if x != ".kstore-tmp"]
            rel = Path(d).relative_to(self.root).as_posix()
            prefix = "" if rel == "." else rel + "/"
            out[prefix] = "<dir>"
            for f in files:
                out[prefix + f] = (Path(d) / f).read_bytes()
        return out


def _make_store(kind: str, root: Path) -> tuple[Any, Snapshot]:
    if kind == "memory":
        inner = MemoryStore()
        inner._data.update(BASE)
        return inner, Snapshot(inner, None)
    path = root / _uuid.uuid4().hex
    for key, value in BASE.items():
        (path / key).parent.mkdir(parents=True, exist_ok=True)
        (path / key).write_bytes(value)
    return LocalStore(path), Snapshot(None, path)


def _named(args: list, kwargs: dict) -> tuple[str, ...]:
    """Dataset uuids a call names (those a key may be built from)."""
    out = [UUID]
    for v in [*(args[:1]), kwargs.get("new_uuid")]:
        if isinstance(v, str):
            try:
                out.append(naming.validate_name(v))
            except KstoreError:
                pass
    return tuple(out)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-api")


@fuzz_settings(400)
@given(kind=st.sampled_from(["memory", "memory", "file"]), call=calls())
def test_public_api_with_hostile_arguments(scratch: Path, kind: str, call: tuple[str, list, dict]) -> None:
    name, args, kwargs = call
    fn, _, writes = FUNCTIONS[name]
    inner, snap = _make_store(kind, scratch)
    rec = CountingStore(inner)
    before = snap.take()
    where = f"{name}({', '.join(map(repr, args))}, {kwargs!r})"[:600]
    try:
        fn(rec, *args, **kwargs)
        ok = True
    except KstoreError:
        ok = False
    except Exception as exc:  # noqa: BLE001 - this is what the suite looks for
        raise AssertionError(f"{where} raised {type(exc).__name__}: {str(exc)[:300]}") from exc
    after = snap.take()
    outside = [(m, k) for m, k in rec.keys if not _owned(k, _named(args, kwargs))]
    assert not outside, f"{where} touched keys of datasets it does not name: {outside[:5]}"
    sentinel_after = {k: v for k, v in after.items() if _owned(k, (SENTINEL,))}
    assert sentinel_after == {k: v for k, v in before.items() if _owned(k, (SENTINEL,))}, f"{where} changed {SENTINEL}"
    if not writes or not ok:
        assert after == before, f"{where} ({'read' if not writes else 'failed write'}) changed the store"
    kstore.read_dataset(inner, UUID)  # the dataset stays readable, whatever the call did
    if isinstance(inner, LocalStore):
        shutil.rmtree(inner.root, ignore_errors=True)


# -- hostile stores: reads create nothing --------------------------------------------------------

STORE_ARGS = st.one_of(
    st.text(max_size=20).filter(lambda s: "://" not in s),
    st.sampled_from(["file://localhost/nope", "file:/nope/x", "file://host/x", "file:rel", "file:", "memory://",
                     "memory://x\x00", "hfs://nope/x", "hfs:///nope/y", "hmemory://", "a\x00b", ".", "..", "/", "~",
                     "nope/../../x"]),
    st.sampled_from(ODD_OBJECTS),
    st.sampled_from(SPECIAL_STRINGS),
)
READERS = [kstore.read_dataset, kstore.load_metadata, kstore.read_schema, kstore.history, kstore.plan_read,
           lambda s, u: list(kstore.iter_dataset(s, u)), lambda s, u: kstore.open_store(s).iter_prefix(u + "/")]


@fuzz_settings(200)
@given(store=STORE_ARGS, reader=st.sampled_from(range(len(READERS))), uuid=UUIDS)
def test_reads_from_hostile_stores_create_nothing(scratch: Path, store: Any, reader: int, uuid: str) -> None:
    cwd = scratch / "cwd"
    cwd.mkdir(exist_ok=True)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        try:
            out = READERS[reader](store, uuid)
            if hasattr(out, "__next__"):
                list(itertools.islice(out, 5))
        except KstoreError:
            pass
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"reader {reader} on store {store!r:.100} raised {type(exc).__name__}: {exc}") from exc
        assert list(cwd.iterdir()) == [], f"reading from {store!r:.100} created {list(cwd.iterdir())}"
    finally:
        os.chdir(old)


# -- the command line: read-only commands with hostile terms --------------------------------------

WHERE = st.one_of(
    st.text(max_size=30),
    st.builds(lambda c, op, v: f"{c} {op} {v}", NAMES, st.sampled_from([o for o in OPS if o]),
              st.one_of(st.text(max_size=10), st.sampled_from(["[1, 2]", "'x'", "None", "1e999", "[" * 300, "(1,)",
                                                               "{1: 2}", "b'x'", "2024-01-01", "-0.0", "9" * 5000]))),
)


@fuzz_settings(200)
@given(command=st.sampled_from(["ls", "info", "plan", "read", "history", "gc"]),
       where=st.lists(st.one_of(WHERE, st.just("--or")), max_size=4),
       extra=st.lists(st.sampled_from(["--columns", "x,p", "--columns", "", "--version", "-1", "--version", "0",
                                       "--limit", "-5", "--format", "json", "--retention-days", "nan"]), max_size=4))
def test_cli_read_commands_with_hostile_terms(scratch: Path, command: str, where: list[str], extra: list[str]) -> None:
    import contextlib
    import io

    from kstore.cli import main

    inner, snap = _make_store("file", scratch)
    before = snap.take()
    argv = [command, inner.root] + ([] if command == "ls" else [UUID])
    if command in ("plan", "read"):
        argv += [x for w in where for x in (["--or"] if w == "--or" else ["--where", w])]
    if command == "gc":
        argv += ["--dry-run"]
    argv += extra
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = main(argv, out=io.StringIO())
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"kstore {argv!r:.300} raised {type(exc).__name__}: {exc}") from exc
    # 0 ok, 1 a KstoreError (message, no traceback), 2 a usage error
    assert code in (0, 1, 2), (argv, code, err.getvalue()[-500:])
    assert "Traceback" not in err.getvalue()
    assert snap.take() == before, f"kstore {argv!r:.300} changed the store"
    shutil.rmtree(inner.root, ignore_errors=True)
