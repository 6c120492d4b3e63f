"""Unit and property tests for kstore.core.planning (pure read planning, no I/O).

The central property: for random partitioned data with a secondary index and statistics,
the planned partitions are a superset of the partitions holding matching rows, and with
only partition-column predicates they are exactly those partitions. Residual predicates
are checked too: evaluating each task's residual on its file's rows yields exactly the
rows that match the whole predicate.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstore.core import naming
from kstore.core.index import ColumnIndex
from kstore.core.metadata import DatasetMetadata
from kstore.core.planning import ReadPlan, ReadTask, label_values, pack_in_order, partition_value_arrays, plan_read
from kstore.core.predicates import OPS
from kstore.core.stats import file_stats, stats_table
from kstore.core.types import encode_partition_value
from kstore.errors import ColumnNotFoundError, CorruptMetadataError, InvalidPredicateError

SETTINGS = settings(max_examples=60, deadline=None)
UUID = "ds"

# -- building datasets in memory ----------------------------------------------------------


def make_dataset(rows: list[dict], pcols: list[str], ptypes: dict[str, pa.DataType], split: list[int],
                 index_cols=("n",), stats_cols=("n", "m"), data_types=None):
    """Metadata, schema, indices and stats for ``rows`` partitioned on ``pcols``.

    Each distinct partition value combination becomes ``split[i] + 1`` files (labels);
    every file holds at least one row. Returns (meta, schema, indices, stats, rows_by_label).
    """
    data_types = data_types or {"n": pa.int64(), "m": pa.int64()}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[tuple(r[c] for c in pcols)].append(r)
    rows_by_label: dict[str, list[dict]] = {}
    for gi, (key, grows) in enumerate(groups.items()):
        n_files = min(len(grows), 1 + split[gi % len(split)])
        for fi in range(n_files):
            part = grows[fi::n_files]
            label = naming.build_label([(c, encode_partition_value(v)) for c, v in zip(pcols, key)], f"f{gi}x{fi}")
            rows_by_label[label] = part
    meta = DatasetMetadata.new(UUID, partition_keys=pcols).with_partitions(
        {label: {"table": naming.data_key(UUID, "table", label)} for label in rows_by_label}
    )
    schema = pa.schema([(c, ptypes[c]) for c in pcols] + list(data_types.items()))
    indices = {}
    for col in index_cols:
        vals, labs = [], []
        for label, rs in rows_by_label.items():
            for r in rs:
                vals.append(r[col])
                labs.append(label)
        indices[col] = ColumnIndex.build(col, pa.array(vals, data_types[col]), pa.array(labs, pa.string()))
    stats = None
    if stats_cols:
        labels = list(rows_by_label)
        st_schema = pa.schema([(c, data_types[c]) for c in stats_cols])
        fstats = [
            file_stats(pa.table({c: pa.array([r[c] for r in rows_by_label[lab]], data_types[c]) for c in stats_cols}), 1)
            for lab in labels
        ]
        stats = stats_table(labels, fstats, st_schema)
    return meta, schema, indices, stats, rows_by_label


# -- strategies ---------------------------------------------------------------------------

PTYPES = {
    # |values| stay below 2**24: larger ints against non-integral float literals are
    # covered by test_large_int_partition_values_with_float_literal
    "int": (pa.int64(), st.integers(-3, 3) | st.integers(-(2**24), 2**24)),
    "str": (pa.string(), st.sampled_from(["", "a", "b", "a/b", "x=y", "100%", "é", " ", "..", "b/"]) | st.text(max_size=3)),
    "date": (pa.date32(), st.dates(dt.date(2024, 1, 1), dt.date(2024, 1, 5)) | st.dates()),
    "bool": (pa.bool_(), st.booleans()),
}
PCOL_NAMES = ["p", "q/x=1 é"]  # the second needs quoting in labels


@st.composite
def int_literal(draw):
    v = draw(st.integers(-4, 4))
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return v + 0.5, v + 0.5
    if kind == 1:
        return float(v), v
    return v, v


def literal_for(kind):
    if kind == "int":
        return int_literal() | st.integers(-(2**24), 2**24).map(lambda v: (v, v)) | st.integers(
            -(2**63), 2**63 - 1).map(lambda v: (v, v))
    if kind == "str":
        return PTYPES["str"][1].map(lambda v: (v, v))
    if kind == "date":
        d = st.dates(dt.date(2023, 12, 31), dt.date(2024, 1, 6))
        return d.map(lambda v: (v, v)) | d.map(lambda v: (v.isoformat(), v)) | d.map(
            lambda v: (pd.Timestamp(v), v))
    return st.booleans().map(lambda v: (v, v))


@st.composite
def scenarios(draw, partition_only=False):
    n_pcols = draw(st.integers(1, 2))
    pcols = PCOL_NAMES[:n_pcols]
    kinds = {c: draw(st.sampled_from(sorted(PTYPES))) for c in pcols}
    pools = {c: draw(st.lists(PTYPES[kinds[c]][1], min_size=1, max_size=4, unique=True)) for c in pcols}
    n_rows = draw(st.integers(1, 25))
    rows = []
    for _ in range(n_rows):
        r = {c: draw(st.sampled_from(pools[c])) for c in pcols}
        r["n"] = draw(st.none() | st.integers(-3, 3))
        r["m"] = draw(st.none() | st.integers(-3, 3))
        rows.append(r)
    split = draw(st.lists(st.integers(0, 2), min_size=1, max_size=4))
    term_cols = pcols if partition_only else pcols + ["n", "m"]

    @st.composite
    def term(draw2):
        c = draw2(st.sampled_from(term_cols))
        op = draw2(st.sampled_from(OPS))
        lits = literal_for(kinds[c]) if c in kinds else int_literal()
        if op in ("in", "not in"):
            pairs = draw2(st.lists(lits, max_size=4))
            return (c, op, [p[0] for p in pairs]), (c, op, [p[1] for p in pairs])
        if op in ("is null", "is not null"):
            return (c, op), (c, op, None)
        raw, sem = draw2(lits)
        return (c, op, raw), (c, op, sem)

    conjs = draw(st.lists(st.lists(term(), min_size=1, max_size=3), min_size=1, max_size=3))
    raw = [[t[0] for t in conj] for conj in conjs]
    sem = [[t[1] for t in conj] for conj in conjs]
    ptypes = {c: PTYPES[kinds[c]][0] for c in pcols}
    return rows, pcols, ptypes, split, raw, sem


def _residual_rows(task, rows, oracle):
    if task.residual is None:
        return list(range(len(rows)))
    dnf = [[(t.column, t.op, t.value) for t in conj] for conj in task.residual]
    return [i for i, r in enumerate(rows) if oracle.eval_dnf(r, dnf)]


@SETTINGS
@given(scenario=scenarios())
def test_plan_is_superset_and_residuals_are_exact(scenario, oracle):
    rows, pcols, ptypes, split, raw, sem = scenario
    meta, schema, indices, stats, rows_by_label = make_dataset(rows, pcols, ptypes, split)
    plan = plan_read(meta, schema, raw, indices=indices, stats=stats)
    matching = {lab for lab, rs in rows_by_label.items() if any(oracle.eval_dnf(r, sem) for r in rs)}
    planned = set(plan.labels)
    assert planned >= matching, (raw, sorted(matching - planned))
    assert planned <= set(rows_by_label)
    assert len(plan.labels) == len(planned)  # no duplicates
    for task in plan.tasks:
        rs = rows_by_label[task.label]
        want = [i for i, r in enumerate(rs) if oracle.eval_dnf(r, sem)]
        assert _residual_rows(task, rs, oracle) == want, (raw, task.residual)
        assert task.key == naming.data_key(UUID, "table", task.label)
        assert dict(task.partition_values) == {c: rs[0][c] for c in pcols}
        for c, v in task.partition_values:
            assert type(v) is type(rs[0][c])


@SETTINGS
@given(scenario=scenarios(partition_only=True))
def test_partition_only_predicates_plan_exactly(scenario, oracle):
    rows, pcols, ptypes, split, raw, sem = scenario
    meta, schema, indices, stats, rows_by_label = make_dataset(rows, pcols, ptypes, split)
    plan = plan_read(meta, schema, raw, indices=indices, stats=stats)
    matching = {lab for lab, rs in rows_by_label.items() if any(oracle.eval_dnf(r, sem) for r in rs)}
    assert set(plan.labels) == matching, raw
    # partition terms are fully answered by the plan: no residual filtering left
    for task in plan.tasks:
        assert task.residual is None
    # the same with no indices and no statistics
    plan2 = plan_read(meta, schema, raw)
    assert set(plan2.labels) == matching


@settings(max_examples=30, deadline=None)
@given(scenario=scenarios())
def test_plan_without_index_or_stats_is_superset(scenario, oracle):
    rows, pcols, ptypes, split, raw, sem = scenario
    meta, schema, indices, stats, rows_by_label = make_dataset(rows, pcols, ptypes, split)
    matching = {lab for lab, rs in rows_by_label.items() if any(oracle.eval_dnf(r, sem) for r in rs)}
    for kwargs in ({}, {"indices": indices}, {"stats": stats}):
        plan = plan_read(meta, schema, raw, **kwargs)
        assert set(plan.labels) >= matching
        for task in plan.tasks:
            rs = rows_by_label[task.label]
            assert _residual_rows(task, rs, oracle) == [i for i, r in enumerate(rs) if oracle.eval_dnf(r, sem)]


# -- targeted cases -----------------------------------------------------------------------


def _simple():
    rows = [
        {"p": 1, "n": 10, "m": 0},
        {"p": 1, "n": 11, "m": 1},
        {"p": 2, "n": 20, "m": 2},
        {"p": 3, "n": None, "m": None},
    ]
    return make_dataset(rows, ["p"], {"p": pa.int64()}, [0])


def test_doc_example():
    meta = DatasetMetadata.new("d", partition_keys=("p",)).with_partitions(
        {"p=1/a": {"table": "d/table/p=1/a.parquet"}, "p=2/a": {"table": "d/table/p=2/a.parquet"}})
    schema = pa.schema([("p", pa.int64()), ("x", pa.string())])
    plan = plan_read(meta, schema, predicates=[[("p", "==", 2)]])
    assert plan.labels == ("p=2/a",)
    assert plan.keys == ("d/table/p=2/a.parquet",)
    assert plan.explain() == "dataset 'd': 2 files -> 1 planned\n  conjunction 1: partition index p: 2 -> 1"


def test_no_predicates_plans_everything():
    meta, schema, indices, stats, rows_by_label = _simple()
    plan = plan_read(meta, schema, None, indices=indices, stats=stats)
    assert set(plan.labels) == set(rows_by_label)
    assert all(t.residual is None for t in plan.tasks)
    assert plan.predicates is None
    assert plan.columns == tuple(schema.names)
    assert plan.n_files == len(rows_by_label)
    assert isinstance(plan, ReadPlan)


def test_explain_mentions_every_stage():
    meta, schema, indices, stats, _ = _simple()
    plan = plan_read(meta, schema, [[("p", "<=", 2), ("n", ">=", 11), ("m", "<", 5)], [("p", "==", 3)]],
                     indices=indices, stats=stats, store_calls={"metadata": 1, "index": 1, "stats": 1})
    text = plan.explain()
    assert text.startswith(f"dataset {UUID!r}: 3 files -> ")
    assert "conjunction 1: partition index p: 3 -> 2" in text
    assert "conjunction 1: secondary index n: 2 -> " in text
    assert "conjunction 1: statistics m: " in text
    assert "conjunction 2: partition index p: 3 -> 1" in text
    assert "planning store calls: 3 (index 1, metadata 1, stats 1)" in text
    assert plan.store_calls == 3
    kinds = {(s.conjunction, s.kind, s.column) for s in plan.stages}
    assert kinds == {(1, "partition index", "p"), (1, "secondary index", "n"), (1, "statistics", "m"),
                     (2, "partition index", "p")}
    for s in plan.stages:
        assert s.after <= s.before
    versioned = plan_read(meta.evolve(version=7), schema, None)
    assert versioned.explain().startswith(f"dataset {UUID!r} version 7: ")


def test_columns_validation():
    meta, schema, *_ = _simple()
    with pytest.raises(ColumnNotFoundError) as exc:
        plan_read(meta, schema, None, columns=["n", "nope", "zz"])
    msg = str(exc.value)
    assert "'nope'" in msg and "'zz'" in msg and f"'{UUID}'" in msg
    plan = plan_read(meta, schema, None, columns=["m", "p"])
    assert plan.columns == ("m", "p")
    assert plan_read(meta, schema, None, columns=[]).columns == ()


def test_predicate_errors_surface():
    meta, schema, *_ = _simple()
    with pytest.raises(ColumnNotFoundError):
        plan_read(meta, schema, [("nope", "==", 1)])
    with pytest.raises(InvalidPredicateError):
        plan_read(meta, schema, [("p", "==", "x")])
    with pytest.raises(InvalidPredicateError):
        plan_read(meta, schema, "p == 1")


def test_empty_dataset():
    meta = DatasetMetadata.new(UUID, partition_keys=("p",))
    schema = pa.schema([("p", pa.int64()), ("n", pa.int64())])
    plan = plan_read(meta, schema, [("p", "==", 1), ("n", "==", 1)],
                     indices={"n": ColumnIndex.empty("n", pa.int64())})
    assert plan.tasks == () and plan.n_files == 0


def test_partition_column_missing_from_schema():
    meta, schema, *_ = _simple()
    # a schema without the partition key 'p' contradicts the metadata: a clear
    # CorruptMetadataError, whatever the predicate (not a bare KeyError from pyarrow)
    bad = pa.schema([("n", pa.int64()), ("m", pa.int64())])
    with pytest.raises(CorruptMetadataError, match="'p'"):
        plan_read(meta, bad, [("n", "==", 10)])
    with pytest.raises(CorruptMetadataError, match="'p'"):
        plan_read(meta, bad, None)
    with pytest.raises(CorruptMetadataError, match="'p'"):
        partition_value_arrays(meta, bad, list(meta.partitions))


def test_secondary_index_prunes_and_keeps_residual():
    meta, schema, indices, _, rows_by_label = _simple()
    plan = plan_read(meta, schema, [("n", "==", 20)], indices=indices)
    assert [naming.parse_label(lab, ["p"])[0] for lab in plan.labels] == [("2",)]
    (task,) = plan.tasks
    assert [[(t.column, t.op, t.value) for t in c] for c in task.residual] == [[("n", "==", 20)]]
    assert task.partition_values == (("p", 2),)


def test_index_labels_unknown_to_metadata_are_ignored():
    meta, schema, indices, _, _ = _simple()
    stale = indices["n"].merge(ColumnIndex.build("n", pa.array([20]), pa.array(["p=9/gone"])))
    plan = plan_read(meta, schema, [("n", "==", 20)], indices={"n": stale})
    assert all(lab in meta.partitions for lab in plan.labels)
    assert len(plan.labels) == 1


def test_stats_rows_missing_for_a_label_keep_it():
    meta, schema, _, stats, rows_by_label = _simple()
    partial = stats.slice(0, 1)
    plan = plan_read(meta, schema, [("m", "==", 99)], stats=partial)
    assert set(plan.labels) == set(rows_by_label) - {partial.column("label")[0].as_py()}


def test_float_index_nan_only_partition_is_planned_for_not_equal():
    # NaN is not indexed, but a NaN row satisfies x != 1.0 / x not in [1.0] / x is not null
    rows = [{"p": 1, "x": 1.0, "m": 0}, {"p": 2, "x": math.nan, "m": 0}]
    meta, schema, indices, _, rows_by_label = make_dataset(
        rows, ["p"], {"p": pa.int64()}, [0], index_cols=("x",), stats_cols=(),
        data_types={"x": pa.float64(), "m": pa.int64()})
    nan_label = next(lab for lab, rs in rows_by_label.items() if rs[0]["p"] == 2)
    for pred in ([("x", "!=", 1.0)], [("x", "not in", [1.0])], [("x", "is not null")]):
        plan = plan_read(meta, schema, pred, indices=indices)
        assert nan_label in plan.labels, pred


def test_large_int_partition_values_with_float_literal():
    rows = [{"p": 2**25, "n": 1, "m": 1}, {"p": 1, "n": 1, "m": 1}]
    meta, schema, *_ = make_dataset(rows, ["p"], {"p": pa.int64()}, [0])
    plan = plan_read(meta, schema, [("p", ">", 0.5)])
    assert len(plan.labels) == 2


def test_kartothek_labels_with_slash_bug_and_timestamps():
    meta = DatasetMetadata.from_dict({
        "dataset_metadata_version": 4, "dataset_uuid": "k", "partition_keys": ["region", "ts"],
        "partitions": {
            "region=a%20b/c%3Dd%25/ts=2024-01-02%2012%3A30%3A00/f1": {
                "files": {"table": "k/table/region=a%20b/c%3Dd%25/ts=2024-01-02%2012%3A30%3A00/f1.parquet"}},
            "region=plain/ts=2024-01-03%2023%3A59%3A59.500000/f1": {
                "files": {"table": "k/table/region=plain/ts=2024-01-03%2023%3A59%3A59.500000/f1.parquet"}},
        },
    })
    schema = pa.schema([("region", pa.string()), ("ts", pa.timestamp("us")), ("v", pa.int64())])
    plan = plan_read(meta, schema, [("region", "==", "a b/c=d%")])
    assert len(plan.tasks) == 1
    assert dict(plan.tasks[0].partition_values) == {"region": "a b/c=d%", "ts": pd.Timestamp("2024-01-02 12:30")}
    plan = plan_read(meta, schema, [("ts", ">", pd.Timestamp("2024-01-03 23:59:59.4"))])
    assert [dict(t.partition_values)["region"] for t in plan.tasks] == ["plain"]
    plan = plan_read(meta, schema, [("ts", "==", "2024-01-03 23:59:59.5")])
    assert len(plan.tasks) == 1
    arrays = partition_value_arrays(meta, schema, list(meta.partitions))
    assert arrays["ts"].type.equals(pa.timestamp("us"))
    assert label_values(meta, list(meta.partitions))[0] == ("a b/c=d%", "2024-01-02 12:30:00")


def test_bool_partition_false_is_false():
    rows = [{"b": False, "n": 1, "m": 1}, {"b": True, "n": 2, "m": 2}]
    meta, schema, *_ = make_dataset(rows, ["b"], {"b": pa.bool_()}, [0])
    plan = plan_read(meta, schema, [("b", "==", False)])
    assert [dict(t.partition_values)["b"] for t in plan.tasks] == [False]


def test_multi_table_file_keys():
    meta = DatasetMetadata.new(UUID, tables=("core", "extra")).with_partitions(
        {"a": {"core": "ds/core/a.parquet", "extra": "ds/extra/a.parquet"}})
    schema = pa.schema([("x", pa.int64())])
    assert plan_read(meta, schema).keys == ("ds/core/a.parquet",)
    plan = plan_read(meta, schema, table="extra")
    assert plan.keys == ("ds/extra/a.parquet",) and plan.table == "extra"


# --- the one bin-packer of the engines' readers (Dask blocksize, Spark input partitions) ----


@settings(max_examples=300, deadline=None)
@given(costs=st.lists(st.one_of(st.none(), st.integers(0, 300)), max_size=40), limit=st.integers(1, 250))
def test_pack_in_order_keeps_order_and_limits(costs, limit):
    tasks = [ReadTask(str(i), f"{i}.parquet", (), None) for i in range(len(costs))]
    groups = pack_in_order(tasks, costs, limit)
    assert [t for g in groups for t in g] == tasks  # order kept, nothing lost or repeated
    cost = dict(zip((t.label for t in tasks), costs))
    for g in groups:
        assert g
        if len(g) > 1:  # several tasks: each known, within the limit together
            assert all(cost[t.label] is not None for t in g)
            assert sum(cost[t.label] for t in g) <= limit
    for a, b in zip(groups, groups[1:]):  # greedy: the next task did not fit (or was unknown)
        nxt = cost[b[0].label]
        if nxt is not None and all(cost[t.label] is not None for t in a):
            assert sum(cost[t.label] for t in a) + nxt > limit


def test_a_format1_partition_without_the_tables_file_is_not_planned():
    """kartothek's multi-table datasets may lack a table in a partition: planning that table
    skips it (no file: no rows), as it does for a format-2 version, instead of naming a file
    that does not exist."""
    raw = {"dataset_metadata_version": 4, "dataset_uuid": UUID, "partition_keys": ["p"],
           "partitions": {"p=1/a": {"files": {"core": "ds/core/p=1/a.parquet", "extra": "ds/extra/p=1/a.parquet"}},
                          "p=2/a": {"files": {"core": "ds/core/p=2/a.parquet"}}}}
    meta = DatasetMetadata.from_dict(raw)
    assert not meta.columnar
    schema = pa.schema([("p", pa.int64()), ("x", pa.int64())])
    extra = plan_read(meta, schema, None, table="extra")
    assert [(t.label, t.key) for t in extra.tasks] == [("p=1/a", "ds/extra/p=1/a.parquet")]
    core = plan_read(meta, schema, [[("p", ">=", 1)]], table="core")
    assert [t.key for t in core.tasks] == ["ds/core/p=1/a.parquet", "ds/core/p=2/a.parquet"]
    columnar = plan_read(meta.with_files(meta.files), schema, None, table="extra")
    assert [t.key for t in columnar.tasks] == [t.key for t in extra.tasks]
