"""Every driver against the same matrix (see ``tests/conformance/__init__.py``).

Each test runs a batch of queries through one driver and compares every returned row,
value by value, with the oracle's answer computed from the source rows; a failure lists
every query that differs (missing / extra ids, the first differing values).
"""

from __future__ import annotations

import datetime as dt
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kstore
from kstore.core.columns import file_names
from kstore.core.types import normalize_schema, written_schema
from tests.conformance import drivers, matrix
from tests.conformance.oracle import canon_rows, diff, expected_rows, matching_ids

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning",
                                        "ignore::UserWarning")

ALL_LAYOUTS = tuple(matrix.LAYOUTS)


def reader_layouts(reader: drivers.Reader) -> tuple[str, ...]:
    """Layouts each reader runs on: all of them for the in-process readers; the costly
    engines (Spark jobs, a process cluster) on two partition columns (30 files) by
    default, everywhere with KSTORE_CONFORMANCE_FULL=1."""
    if matrix.FULL or reader.engine == "eager" or reader.name == "dask_threads":
        return ALL_LAYOUTS
    return ("2cols",)


def _marks(group: str | None) -> list:
    return [pytest.mark.xdist_group(group)] if group else []


READ_CASES = [pytest.param(r, lay, marks=_marks(r.group), id=f"{r.name}-{lay}")
              for r in drivers.READERS.values() for lay in reader_layouts(r)]
REUSE_CASES = [pytest.param(r, lay, marks=_marks(r.group), id=f"{r.name}-{lay}")
               for r in drivers.READERS.values() if r.engine in ("dask", "spark") for lay in reader_layouts(r)]
WRITE_CASES = [pytest.param(w, lay, marks=_marks(g), id=f"{w}-{lay}") for w, g in drivers.WRITERS.items()
               for lay in (ALL_LAYOUTS if matrix.FULL or w != "dask_distributed" else ("2cols",))]
CROSS_READERS = (tuple(drivers.READERS) if matrix.FULL
                 else ("eager_read_dataset", "dask_threads", "spark_read_dataset") + (("spark_jvm",) if matrix.JVM else ()))
def _cross_group(writer_group: str | None, reader_group: str | None) -> str | None:
    """Spark's group when either side needs Spark (one session per worker), else either."""
    spark = drivers.SPARK_GROUP
    return spark if spark in (writer_group, reader_group) else writer_group or reader_group


CROSS_CASES = [  # (the eager writer's datasets are what every reader test reads)
    pytest.param(w, drivers.READERS[r], marks=_marks(_cross_group(g, drivers.READERS[r].group)), id=f"{w}-to-{r}")
    for w, g in drivers.WRITERS.items() for r in CROSS_READERS if w != "eager" or matrix.FULL
]


def _check(reader: drivers.Reader, queries: list, results: list, expected: list, names: list[str]) -> None:
    problems = []
    for name, (columns, _dnf, _pushed), got, want in zip(names, queries, results, expected):
        rows = canon_rows(got, _source_schema(), nan_is_null=reader.nan_is_null)
        problem = diff(rows, want)
        if problem is None and columns and rows and list(rows[0]) != list(columns):
            problem = f"columns {list(rows[0])}, want {list(columns)} in that order"
        if problem:
            problems.append(f"{name}: {problem}")
    assert not problems, f"{reader.name}: {len(problems)} of {len(queries)} case(s) differ:\n  " + "\n  ".join(problems)


_SCHEMA: list[pa.Schema] = []


def _source_schema() -> pa.Schema:
    if not _SCHEMA:
        _SCHEMA.append(matrix.source_table().schema)
    return _SCHEMA[0]


# ---------------------------------------------------------------------------------------
# reads
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("reader, layout", READ_CASES)
def test_full_read_and_projections(reader, layout, datasets, engines, source):
    """Every row and value; projections return exactly their columns in their order;
    ``columns=[]`` returns every row and no column."""
    _full_read_and_projections(reader, layout, *datasets.get("eager", layout), engines, source)


#: every reader on a dataset whose files hold every column under another name, with a
#: dropped column (#33's rename_columns / drop_columns; drivers._write_renamed)
RENAMED_CASES = [pytest.param(r, "2cols", marks=_marks(r.group), id=f"{r.name}-renamed")
                 for r in drivers.READERS.values()]


@pytest.mark.parametrize("reader, layout", RENAMED_CASES)
def test_renamed_and_dropped_columns_read_exactly(reader, layout, datasets, engines, source):
    """After renames (every data column, the indexed ones too) and a drop, every reader
    returns the source exactly under the dataset's names, predicates included (pushed to the
    planner: the renamed indices and statistics prune), and never a dropped value."""
    url, uuid = datasets.get("eager_renamed", layout)
    schema = kstore.read_schema(url, uuid)
    renamed = file_names(schema)
    assert "gone" not in schema.names and renamed["i64"] == "was_i64" and len(renamed) == len(source.column_names) - 2
    _full_read_and_projections(reader, layout, url, uuid, engines, source)
    _predicates(reader, True, url, uuid, engines, source)


def _full_read_and_projections(reader, layout, url, uuid, engines, source) -> None:
    projections = {k: (matrix.reversed_columns(source) if v is None else v) for k, v in matrix.PROJECTIONS.items()}
    queries = [(None, None, True)] + [(cols, None, True) for cols in projections.values()]
    results = reader.run(engines, url, uuid, queries)
    ids = source.column("id").to_pylist()
    expected = [expected_rows(source, ids, source.column_names, nan_is_null=reader.nan_is_null)]
    expected += [expected_rows(source, ids, cols, nan_is_null=reader.nan_is_null) for cols in projections.values()]
    full = results[0]
    assert full and set(full[0]) == set(source.column_names)
    first = list(full[0])[: len(matrix.LAYOUTS[layout])]
    assert first == list(matrix.LAYOUTS[layout]), f"partition columns first, got {list(full[0])}"
    results[0] = [{c: r[c] for c in source.column_names} for r in full]  # compare values in source order
    _check(reader, queries, results, expected, ["full"] + list(projections))


@pytest.mark.parametrize("pushed", [True, False], ids=["pushed", "engine"])
@pytest.mark.parametrize("reader, layout", READ_CASES)
def test_predicates(reader, layout, pushed, datasets, engines, source):
    """Each predicate pushed to kstore's planner, or evaluated by the engine over a full
    read; every matching row with all its values (and one projected, one counted)."""
    _predicates(reader, pushed, *datasets.get("eager", layout), engines, source)


def _predicates(reader, pushed, url, uuid, engines, source) -> None:
    semantics = drivers.value_semantics(reader, pushed)
    names = list(matrix.FORMAT_PUSHED_PREDICATES if reader.name == "spark_format" and pushed
                 else matrix.DEFAULT_PREDICATES)
    queries = [(None, matrix.PREDICATES[n], pushed) for n in names]
    queries.append((["id", "p_str"], matrix.PREDICATES["dnf-partition-binary"], pushed))
    queries.append(([], matrix.PREDICATES["eq-int-indexed"], pushed))
    names += ["projected dnf-partition-binary", "counted eq-int-indexed"]
    results = reader.run(engines, url, uuid, queries)
    expected = []
    for columns, dnf, _ in queries:
        ids = matching_ids(source, dnf, semantics)
        expected.append(expected_rows(source, ids, columns or [] if columns is not None else source.column_names,
                                      nan_is_null=reader.nan_is_null))
    results = [[{c: r[c] for c in source.column_names} for r in rows] if columns is None else rows
               for (columns, _, _), rows in zip(queries, results)]
    _check(reader, queries, results, expected, names)


@pytest.mark.parametrize("reader, layout", REUSE_CASES)
def test_dataframe_reuse(reader, layout, datasets, engines, source):
    """Unions, self-joins and repeated actions of ONE lazy DataFrame (Spark plans both
    sides of a union on one relation; Dask shares the read graph)."""
    url, uuid = datasets.get("eager", layout)
    if reader.engine == "spark":
        how = {"spark_read_dataset": "read_dataset", "spark_jvm": "jvm"}.get(reader.name, "format")
        got = drivers.spark_reuse(engines, url, uuid, how)
    else:
        got = drivers.dask_reuse(engines, url, uuid, reader.name == "dask_distributed")
    want = drivers.reuse_oracle(source, reader.semantics)
    bad = {k: (sorted(got[k]), sorted(v)) for k, v in want.items() if sorted(got[k]) != sorted(v)}
    assert not bad, f"{reader.name}: reuse cases differ (got, want): {bad}"


# ---------------------------------------------------------------------------------------
# writes
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("writer, layout", WRITE_CASES)
def test_writer_round_trip(writer, layout, datasets, source):
    """What each writer wrote: the source's written types (the dataset schema keeps them;
    ``_common_metadata`` the normalized ones) and every value, read back exactly (kstore's
    Arrow reader), partitioned as asked."""
    url, uuid = datasets.get(writer, layout)
    cols = drivers.written_columns(writer, source)
    meta = kstore.load_metadata(url, uuid)
    assert meta.partition_keys == matrix.LAYOUTS[layout]
    assert set(meta.indices) == set(matrix.INDICES)
    schema = kstore.read_schema(url, uuid)
    want_schema = written_schema(source.select(cols).schema)
    assert {f.name: f.type for f in schema} == {f.name: f.type for f in want_schema}
    assert {f.name: f.type for f in kstore.read_table(url, uuid, columns=cols).schema} == {
        f.name: f.type for f in want_schema}
    meta_key = f"{uuid}/{meta.table}/_common_metadata"
    common = pq.read_schema(io.BytesIO(kstore.open_store(url).get(meta_key)))
    assert {f.name: f.type for f in common} == {f.name: f.type for f in normalize_schema(want_schema)}
    got = kstore.read_table(url, uuid, columns=cols).to_pylist()
    problem = diff(canon_rows(got, source.schema), expected_rows(source, source.column("id").to_pylist(), cols,
                                                                 nan_is_null=False))
    assert problem is None, f"{writer}: {problem}"
    # the index of each indexed column answers like the data
    for col in matrix.INDICES:
        value = next(v for v in source.column(col).to_pylist() if v is not None)
        ids = kstore.read_table(url, uuid, columns=["id"], predicates=[[(col, "==", value)]]).column("id").to_pylist()
        assert sorted(ids) == matching_ids(source, [[(col, "==", value)]], "ieee"), col


@pytest.mark.parametrize("writer, reader", CROSS_CASES)
def test_other_engines_read_what_each_writer_wrote(writer, reader, datasets, engines, source):
    url, uuid = datasets.get(writer, "2cols")
    cols = drivers.written_columns(writer, source)
    got = reader.run(engines, url, uuid, [(cols, None, True)])
    want = expected_rows(source, source.column("id").to_pylist(), cols, nan_is_null=reader.nan_is_null)
    _check(reader, [(cols, None, True)], got, [want], [f"{writer} -> {reader.name}"])


# ---------------------------------------------------------------------------------------
# random predicates (hypothesis): kstore's planner == the oracle
# ---------------------------------------------------------------------------------------

_LITERALS = {
    "i64": st.sampled_from([5, 0, 17, -1, 2**62]),
    "f64": st.sampled_from([0.1, 0.0, -0.0, 1e300, -2.5, float("inf")]),
    "s": st.sampled_from(["a/b", "ü", "", "b", "%2F", "zz"]),
    "p_str": st.sampled_from(["a", "b/c", "ü %", " lead", "x=y", "q"]),
    "p_int": st.sampled_from([-1, 0, 7, 3]),
    "d": st.sampled_from([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1), dt.date(2262, 4, 12)]),
    "ts": st.sampled_from([matrix.TS_MIN, matrix.TS_MAX, dt.datetime(2024, 2, 29, 12, tzinfo=matrix.UTC)]),
    "dec": st.sampled_from([matrix.DEC_MAX, -matrix.DEC_MAX, matrix.DEC_MAX - 1]),
    "bin": st.sampled_from([b"\xff\x00", b"", b"ok", b"\x80"]),
    "bo": st.booleans(),
}
_OPS = ["==", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null"]


@st.composite
def _terms(draw):
    col = draw(st.sampled_from(sorted(_LITERALS)))
    op = draw(st.sampled_from(_OPS))
    if op in ("is null", "is not null"):
        return (col, op)
    if op in ("in", "not in"):
        return (col, op, draw(st.lists(_LITERALS[col], max_size=3)))
    return (col, op, draw(_LITERALS[col]))


@settings(max_examples=300 if matrix.FULL else 40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(dnf=st.lists(st.lists(_terms(), min_size=1, max_size=3), min_size=1, max_size=3))
def test_random_predicates_eager(datasets, source, dnf):
    url, uuid = datasets.get("eager", "2cols")
    got = kstore.read_table(url, uuid, predicates=dnf, columns=["id"]).column("id").to_pylist()
    assert sorted(got) == matching_ids(source, dnf, "ieee"), dnf
