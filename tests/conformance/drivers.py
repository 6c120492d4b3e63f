"""One adapter per engine: writers turn the source table into a dataset, readers run a
batch of queries and return raw rows (the test canonicalizes them with ``oracle.canon``).

A query is ``(columns, dnf, pushed)``: ``pushed`` queries give the predicate to kstore's
planner (``predicates``); the others read every row and let the engine filter (a pandas or
Dask mask, an Arrow expression, Spark's ``.filter``), as users of that engine would.
Readers batch what their engine batches well (one ``dask.compute``, one Spark job per
column set, a union of the queries' DataFrames), which is a reuse test of its own.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

import kstore
from tests.conformance import matrix
from tests.conformance.oracle import frame_rows

Query = tuple[list[str] | None, list | None, bool]  # columns, DNF, pushed


@dataclass
class Engines:
    """Engine handles, created on first use (a test that needs no Spark starts none)."""

    get_spark: Callable[[], Any]
    get_client: Callable[[], Any]
    _cache: dict = field(default_factory=dict)

    @property
    def spark(self) -> Any:
        if "spark" not in self._cache:
            self._cache["spark"] = self.get_spark()
        return self._cache["spark"]

    @property
    def client(self) -> Any:
        if "client" not in self._cache:
            self._cache["client"] = self.get_client()
        return self._cache["client"]


# ---------------------------------------------------------------------------------------
# writers
# ---------------------------------------------------------------------------------------

SPARK_DDL = {
    "id": "long", "p_str": "string", "p_int": "long", "b8": "byte", "s16": "short", "i32": "int", "i64": "long",
    "f32": "float", "f64": "double", "dec": "decimal(38,10)", "dec2": "decimal(10,2)", "bo": "boolean",
    "s": "string", "bin": "binary", "d": "date", "ts": "timestamp", "ntz": "timestamp_ntz", "lst": "array<bigint>",
    "st": "struct<x:bigint,y:string>", "cat": "string",
}


def spark_frame(spark: Any, source: pa.Table) -> Any:
    """The source as a Spark DataFrame built from Python rows (no pandas, no kstore)."""
    cols = [c for c in source.column_names if c not in matrix.NOT_SPARK_WRITABLE]
    rows = []
    for r in source.select(cols).to_pylist():
        st = r["st"]
        rows.append(tuple((st["x"], st["y"]) if c == "st" and st is not None else r[c] for c in cols))
    return spark.createDataFrame(rows, ", ".join(f"{c} {SPARK_DDL[c]}" for c in cols))


def _dask_frame(source: pa.Table, npartitions: int = 3) -> Any:
    import dask.dataframe as dd

    # Arrow-backed pandas dtypes keep nulls apart from NaN and bytes apart from strings
    pdf = source.to_pandas(types_mapper=lambda t: None if pat.is_dictionary(t) else pd.ArrowDtype(t))
    return dd.from_pandas(pdf, npartitions=npartitions, sort=False)


def write(writer: str, engines: Engines, url: str, uuid: str, source: pa.Table, partition_on: Sequence[str]) -> None:
    """Write ``source`` as dataset ``uuid`` with ``writer``."""
    pon, idx = list(partition_on), list(matrix.INDICES)
    if writer == "eager":
        half = source.num_rows // 2
        kstore.store_dataset(url, uuid, [source.slice(0, half), source.slice(half)], partition_on=pon,
                             secondary_indices=idx)
    elif writer in ("dask", "dask_distributed"):
        import dask

        import kstore.dask as kd

        with dask.config.set(scheduler=engines.client if writer == "dask_distributed" else "threads"):
            kd.store_dataset(url, uuid, _dask_frame(source), partition_on=pon, secondary_indices=idx)
    elif writer == "spark_store_dataset":
        import kstore.spark as ks

        ks.store_dataset(url, uuid, spark_frame(engines.spark, source), partition_on=pon, secondary_indices=idx)
    elif writer == "spark_jvm":  # a path, partitionBy, a save mode: as a Delta user writes
        w = (spark_frame(engines.spark, source).write.format("kstore").option("secondary_indices", ",".join(idx))
             .mode("overwrite"))
        (w.partitionBy(*pon) if pon else w).save(f"{url}/{uuid}")
    elif writer == "eager_renamed":  # #33's column mapping: the files hold other names than the dataset
        _write_renamed(url, uuid, source, pon, idx)
    elif writer == "spark_datasource":
        w = (spark_frame(engines.spark, source).write.format("kstore").option("dataset_uuid", uuid)
             .option("secondary_indices", ",".join(idx)).mode("overwrite"))
        if pon:
            w = w.option("partition_on", ",".join(pon))
        w.save(url)
    else:
        raise AssertionError(writer)


def _write_renamed(url: str, uuid: str, source: pa.Table, pon: list[str], idx: list[str]) -> None:
    """The first half of ``source`` written with every column but the partition columns
    stored as ``was_<name>`` (the indices too) and a column ``gone``; ``gone`` dropped, the
    columns renamed to their names (no data file rewritten), then the second half appended
    under the dataset's names (its files store them as ``was_<name>`` too). Readers must
    return ``source`` exactly, and never the dropped values."""
    stored = {c: f"was_{c}" for c in source.column_names if c not in pon}
    half = source.num_rows // 2
    first = source.slice(0, half)
    first = first.rename_columns([stored.get(c, c) for c in first.column_names]).append_column(
        "gone", pa.array([f"dropped-{i}" for i in range(first.num_rows)]))
    kstore.store_dataset(url, uuid, first, partition_on=pon, secondary_indices=[stored.get(c, c) for c in idx])
    kstore.drop_columns(url, uuid, ["gone"])
    kstore.rename_columns(url, uuid, {v: k for k, v in stored.items()})
    kstore.update_dataset(url, uuid, source.slice(half))


def written_columns(writer: str, source: pa.Table) -> list[str]:
    """The source columns a writer can write (Spark has no unsigned type)."""
    skip = matrix.NOT_SPARK_WRITABLE if writer.startswith("spark") else ()
    return [c for c in source.column_names if c not in skip]


# ---------------------------------------------------------------------------------------
# engine-side filters (the "not pushed" queries)
# ---------------------------------------------------------------------------------------


def _pandas_literal(s: Any, lit: Any) -> Any:
    if str(s.dtype).startswith("datetime64") and isinstance(lit, (dt.date, dt.datetime)):
        return pd.Timestamp(lit)
    return lit


def _pandas_term(s: Any, op: str, lit: Any) -> Any:
    """One term as a boolean pandas / Dask Series with SQL null handling (NaN is missing)."""
    if op == "is null":
        return s.isnull()
    if op == "is not null":
        return s.notnull()
    if s.dtype == object:  # bytes, Decimal, lists: compared value by value, as pandas users do
        from tests.conformance.oracle import match

        def one(v: Any) -> bool:
            return match(None if v is None or v is pd.NA else v, op, lit, "pandas")

        return s.map(one, meta=(s.name, "bool")) if _is_dask(s) else s.map(one).astype(bool)
    if op in ("in", "not in"):
        # (no .astype(bool) on isin: Dask 2026.8 computes df[s.isin(...).astype(bool)] to a Series)
        hit = s.isin([_pandas_literal(s, v) for v in lit])
        return (hit if op == "in" else ~hit) & s.notnull()
    lit = _pandas_literal(s, lit)
    cmp = {"==": s == lit, "!=": s != lit, "<": s < lit, "<=": s <= lit, ">": s > lit, ">=": s >= lit}[op]
    return cmp.fillna(False).astype(bool) & s.notnull()


def _is_dask(s: Any) -> bool:
    return type(s).__module__.startswith("dask")


def pandas_mask(df: Any, dnf: list) -> Any:
    """A DNF predicate as a boolean mask over a pandas or Dask DataFrame."""
    out = None
    for conj in dnf:
        m = None
        for col, op, *rest in conj:
            term = _pandas_term(df[col], op, rest[0] if rest else None)
            m = term if m is None else m & term
        out = m if out is None else out | m
    return out


def arrow_filter(table: pa.Table, dnf: list) -> pa.Table:
    """A DNF predicate evaluated by Arrow compute (IEEE NaN semantics)."""
    out = None
    for conj in dnf:
        m = None
        for col, op, *rest in conj:
            f, t = pc.field(col), table.schema.field(col).type
            lit = rest[0] if rest else None
            if op == "is null":
                e = f.is_null()
            elif op == "is not null":
                e = f.is_valid()
            elif op in ("in", "not in"):
                e = f.isin(pa.array(lit, t))
                e = e if op == "in" else ~e & f.is_valid()
            else:
                s = pa.scalar(lit, t)
                e = {"==": f == s, "!=": f != s, "<": f < s, "<=": f <= s, ">": f > s, ">=": f >= s}[op]
            m = e if m is None else m & e
        out = m if out is None else out | m
    return table.filter(out)


def _sql_literal(value: Any, spark_type: Any) -> Any:
    """A Spark literal of exactly the column's type (SQL text, so year 1 and 9999 work)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(value, bool) or isinstance(value, str):
        return F.lit(value)
    if isinstance(value, bytes):
        return F.expr(f"X'{value.hex()}'")
    if isinstance(value, dt.datetime):
        if isinstance(spark_type, T.TimestampNTZType):
            return F.expr(f"TIMESTAMP_NTZ'{value.isoformat(sep=' ')}'")
        return F.expr(f"TIMESTAMP'{value.astimezone(dt.timezone.utc).replace(tzinfo=None).isoformat(sep=' ')}+00:00'")
    if isinstance(value, dt.date):
        return F.expr(f"DATE'{value.isoformat()}'")
    text = repr(value) if isinstance(value, float) else str(value)
    return F.expr(f"CAST('{text}' AS {spark_type.simpleString()})")


def spark_condition(df: Any, dnf: list) -> Any:
    """A DNF predicate as a Spark Column (Spark's semantics)."""
    from pyspark.sql import functions as F

    types = {f.name: f.dataType for f in df.schema.fields}
    out = None
    for conj in dnf:
        m = None
        for col, op, *rest in conj:
            c, lit = F.col(col), rest[0] if rest else None
            if op == "is null":
                e = c.isNull()
            elif op == "is not null":
                e = c.isNotNull()
            elif op in ("in", "not in"):
                if not lit:
                    e = F.lit(False) if op == "in" else c.isNotNull()
                else:
                    e = c.isin(*[_sql_literal(v, types[col]) for v in lit])
                    e = e if op == "in" else ~e
            else:
                v = _sql_literal(lit, types[col])
                e = {"==": c == v, "!=": c != v, "<": c < v, "<=": c <= v, ">": c > v, ">=": c >= v}[op]
            m = e if m is None else m & e
        out = m if out is None else out | m
    return out


# ---------------------------------------------------------------------------------------
# readers
# ---------------------------------------------------------------------------------------


#: xdist group of the suite's Spark tests: one Spark session on one worker, while
#: tests/drivers/test_spark.py (group "spark") may run on the other one.
SPARK_GROUP = "spark-conformance"


@dataclass(frozen=True)
class Reader:
    name: str
    engine: str  # eager | dask | spark
    semantics: str  # how its engine compares NaN (oracle.match)
    nan_is_null: bool  # its output cannot tell NaN from a missing float
    run: Callable[[Engines, str, str, list[Query]], list[list[dict]]]
    group: str | None = None  # xdist group (one Spark session / Dask cluster per worker)


def _eager_frame(url: str, uuid: str, columns, dnf, **kw) -> Any:
    return kstore.read_dataset(url, uuid, columns=columns, predicates=dnf, **kw)


def _project(rows: list[dict], columns) -> list[dict]:
    return rows if columns is None else [{c: r[c] for c in columns} for r in rows]


def _run_eager_pandas(engines: Engines, url: str, uuid: str, queries: list[Query]) -> list[list[dict]]:
    out = []
    for columns, dnf, pushed in queries:
        if pushed or not dnf:
            out.append(frame_rows(_eager_frame(url, uuid, columns, dnf)))
        else:
            df = _eager_frame(url, uuid, None, None)
            df = df[pandas_mask(df, dnf)]
            out.append(frame_rows(df if columns is None else df[columns]))
    return out


def _run_eager_arrow(engines: Engines, url: str, uuid: str, queries: list[Query], *, table: bool) -> list[list[dict]]:
    def read(columns, dnf) -> pa.Table:
        if table:
            return kstore.read_table(url, uuid, columns=columns, predicates=dnf)
        return kstore.read_dataset(url, uuid, columns=columns, predicates=dnf, as_arrow=True)

    out = []
    for columns, dnf, pushed in queries:
        if pushed or not dnf:
            t = read(columns, dnf)
        else:
            t = arrow_filter(read(None, None), dnf)
            t = t if columns is None else t.select(columns)
        out.append(t.to_pylist() if t.num_columns else [{} for _ in range(t.num_rows)])
    return out


def _run_iter(engines: Engines, url: str, uuid: str, queries: list[Query]) -> list[list[dict]]:
    out = []
    for columns, dnf, pushed in queries:
        frames = list(kstore.iter_dataset(url, uuid, columns=columns if pushed or not dnf else None,
                                          predicates=dnf if pushed else None))
        dtypes = {str(f.dtypes.to_dict()) for f in frames if len(f)}
        assert len(dtypes) <= 1, f"iter_dataset frames disagree on dtypes: {dtypes}"
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        if dnf and not pushed and len(df):
            df = df[pandas_mask(df, dnf)]
            df = df if columns is None else df[columns]
        out.append(frame_rows(df))
    return out


def _run_dask(engines: Engines, url: str, uuid: str, queries: list[Query], *, distributed: bool) -> list[list[dict]]:
    import dask

    import kstore.dask as kd

    scheduler = engines.client if distributed else "threads"
    with dask.config.set(scheduler=scheduler):
        lazies, metas = [], []
        for columns, dnf, pushed in queries:
            if pushed or not dnf:
                ddf = kd.read_dataset(url, uuid, columns=columns, predicates=dnf)
            else:
                ddf = kd.read_dataset(url, uuid)
                ddf = ddf[pandas_mask(ddf, dnf)]
                ddf = ddf if columns is None else ddf[columns]
            lazies.append(ddf)
            metas.append(ddf.dtypes.to_dict())
        results = dask.compute(*lazies)
    out = []
    for df, meta in zip(results, metas):
        assert df.dtypes.to_dict() == meta, f"Dask meta {meta} but partitions gave {df.dtypes.to_dict()}"
        out.append(frame_rows(df))
    return out


def spark_canonical(df: Any) -> Any:
    """Timestamps as microseconds in Spark (PySpark cannot collect year-1 timestamps)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    cols = []
    for f in df.schema.fields:
        if isinstance(f.dataType, T.TimestampType):
            cols.append(F.expr(f"unix_micros(`{f.name}`)").alias(f.name))
        elif isinstance(f.dataType, T.TimestampNTZType):
            cols.append(F.expr(f"unix_micros(CAST(`{f.name}` AS TIMESTAMP))").alias(f.name))
        else:
            cols.append(F.col(f"`{f.name}`"))
    return df.select(*cols)


def collect_rows(df: Any) -> list[dict]:
    return [r.asDict(recursive=True) for r in spark_canonical(df).collect()]


def _spark_load(engines: Engines, url: str, uuid: str, columns, dnf, how: str) -> Any:
    from pyspark.sql import functions as F

    import kstore.spark as ks
    from kstore.spark.reader import encode_predicates

    if how == "read_dataset":
        return ks.read_dataset(url, uuid, columns=columns, predicates=dnf, spark=engines.spark)
    if how == "jvm":  # a path names the dataset; Spark pushes .filter to kstore's planner
        df = engines.spark.read.format("kstore").load(f"{url}/{uuid}")
        if dnf is not None:
            df = df.filter(spark_condition(df, dnf))
        return df.select(*[F.col(f"`{c}`") for c in columns]) if columns is not None else df
    reader = engines.spark.read.format("kstore").option("dataset_uuid", uuid)
    if columns:
        reader = reader.option("columns", ",".join(columns))
    if dnf is not None:
        reader = reader.option("predicates", json_predicates(dnf) or encode_predicates(dnf))
    df = reader.load(url)
    return df.select() if columns is not None and not columns else df


def json_predicates(dnf: list) -> str | None:
    """The ``predicates`` option as JSON text, as a user types it (numbers written out in
    full, so decimal(38, s) literals keep every digit; dates and timestamps as ISO text);
    None when a literal has no JSON form (bytes)."""

    def lit(v: Any) -> str:
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(lit(x) for x in v) + "]"
        if isinstance(v, bytes):
            raise TypeError(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (dt.date, dt.datetime)):
            return '"' + v.isoformat() + '"'
        if isinstance(v, str):
            return json.dumps(v)
        return repr(v) if isinstance(v, float) else str(v)  # int, Decimal: every digit

    try:
        return "[" + ", ".join("[" + ", ".join("[" + ", ".join([json.dumps(t[0]), json.dumps(t[1])]
                                                              + [lit(x) for x in t[2:]]) + "]"
                                               for t in conj) + "]" for conj in dnf) + "]"
    except TypeError:
        return None


def _run_spark(engines: Engines, url: str, uuid: str, queries: list[Query], *, how: str) -> list[list[dict]]:
    """All queries of one column set in one Spark job: a union of their DataFrames.

    Engine-filtered queries are, by default, one scan of one DataFrame that Spark evaluates
    every condition on (a flag column each); with KSTORE_CONFORMANCE_FULL=1 they are a
    union of one ``.filter`` per query over ONE DataFrame (the relation reused N times).
    """
    from pyspark.sql import functions as F

    base = _spark_load(engines, url, uuid, None, None, how)
    out: list[list[dict]] = [[] for _ in queries]
    parts: dict[tuple, list] = {}
    flagged = []
    for i, (columns, dnf, pushed) in enumerate(queries):
        if pushed or not dnf:
            df = _spark_load(engines, url, uuid, columns, dnf, how)
        elif not matrix.FULL:
            flagged.append(i)
            continue
        else:
            df = base.filter(spark_condition(base, dnf))
            df = df.select(*[F.col(f"`{c}`") for c in columns]) if columns is not None else df
        parts.setdefault(tuple(df.columns), []).append(spark_canonical(df).select(F.lit(i).alias("__q"), "*"))
    for frames in parts.values():
        union = reduce(lambda a, b: a.unionByName(b), frames).coalesce(2)  # fewer, longer tasks
        for r in union.collect():
            d = r.asDict(recursive=True)
            out[d.pop("__q")].append(d)
    if flagged:
        conds = [spark_condition(base, queries[i][1]).alias(f"__q{i}") for i in flagged]
        for r in spark_canonical(base.select("*", *conds)).collect():
            d = r.asDict(recursive=True)
            for i in flagged:
                if d.pop(f"__q{i}"):
                    columns = queries[i][0]
                    out[i].append(d if columns is None else {c: d[c] for c in columns})
    return out


READERS: dict[str, Reader] = {
    "eager_read_dataset": Reader("eager_read_dataset", "eager", "pandas", True, _run_eager_pandas),
    "eager_as_arrow": Reader("eager_as_arrow", "eager", "ieee", False,
                             lambda e, u, d, q: _run_eager_arrow(e, u, d, q, table=False)),
    "eager_read_table": Reader("eager_read_table", "eager", "ieee", False,
                               lambda e, u, d, q: _run_eager_arrow(e, u, d, q, table=True)),
    "iter_dataset": Reader("iter_dataset", "eager", "pandas", True, _run_iter),
    "dask_threads": Reader("dask_threads", "dask", "pandas", True,
                           lambda e, u, d, q: _run_dask(e, u, d, q, distributed=False)),
    "dask_distributed": Reader("dask_distributed", "dask", "pandas", True,
                               lambda e, u, d, q: _run_dask(e, u, d, q, distributed=True), group="dask-conformance"),
    "spark_read_dataset": Reader("spark_read_dataset", "spark", "spark", False,
                                 lambda e, u, d, q: _run_spark(e, u, d, q, how="read_dataset"),
                                 group=SPARK_GROUP),
    "spark_format": Reader("spark_format", "spark", "spark", False,
                           lambda e, u, d, q: _run_spark(e, u, d, q, how="format"), group=SPARK_GROUP),
}

#: writer -> xdist group
WRITERS = {"eager": None, "dask": None, "dask_distributed": "dask-conformance", "spark_store_dataset": SPARK_GROUP,
           "spark_datasource": SPARK_GROUP}
if matrix.JVM:  # kstore's JVM source: every filter is Spark's (pushed to kstore's planner by Spark itself)
    READERS["spark_jvm"] = Reader("spark_jvm", "spark", "spark", False,
                                  lambda e, u, d, q: _run_spark(e, u, d, q, how="jvm"), group=SPARK_GROUP)
    WRITERS["spark_jvm"] = SPARK_GROUP


def value_semantics(reader: Reader, pushed: bool) -> str:
    """Pushed predicates are kstore's (IEEE NaN); engine filters follow the engine (the JVM
    source's filters are always Spark's: Spark evaluates them, kstore only skips files)."""
    return "ieee" if pushed and reader.name != "spark_jvm" else reader.semantics


# -- reuse: one DataFrame in several roles ------------------------------------------------

#: (name, build, oracle) over a DataFrame-like of the dataset: ids each case returns
REUSE_FILTERS = {"a": [[("p_int", "==", 7)]], "b": [[("i64", "==", 5)], [("p_str", "==", "b/c")]],
                 "c": [[("s", "in", ["a/b", "ü"])]]}


def spark_reuse(engines: Engines, url: str, uuid: str, how: str) -> dict[str, list[int]]:
    """Row ids of unions, self-joins and repeated actions of ONE DataFrame (Spark)."""
    d = _spark_load(engines, url, uuid, None, None, how)

    def f(name: str) -> Any:
        return d.filter(spark_condition(d, REUSE_FILTERS[name]))

    ids = {}
    ids["union a+all"] = [r.id for r in f("a").union(d).select("id").collect()]
    ids["union all+b"] = [r.id for r in d.union(f("b")).select("id").collect()]
    ids["join a*b"] = [r.id for r in f("a").select("id").join(f("b").select("id"), "id").collect()]
    ids["join c*all"] = [r.id for r in f("c").select("id").join(d.select("id"), "id").collect()]
    ids["repeat all"] = [r.id for r in d.select("id").collect()]
    ids["repeat b"] = [r.id for r in f("b").select("id").collect()]
    ids["repeat all again"] = [r.id for r in d.select("id").collect()]
    return ids


def dask_reuse(engines: Engines, url: str, uuid: str, distributed: bool) -> dict[str, list[int]]:
    import dask
    import dask.dataframe as dd

    import kstore.dask as kd

    with dask.config.set(scheduler=engines.client if distributed else "threads"):
        d = kd.read_dataset(url, uuid)

        def f(name: str) -> Any:
            return d[pandas_mask(d, REUSE_FILTERS[name])]

        cases = {
            "union a+all": dd.concat([f("a"), d])["id"],
            "union all+b": dd.concat([d, f("b")])["id"],
            "join a*b": f("a")[["id"]].merge(f("b")[["id"]], on="id")["id"],
            "join c*all": f("c")[["id"]].merge(d[["id"]], on="id")["id"],
            "repeat all": d["id"],
            "repeat b": f("b")["id"],
            "repeat all again": d["id"],
        }
        results = dask.compute(*cases.values())
    return {k: [int(i) for i in v.tolist()] for k, v in zip(cases, results)}


def reuse_oracle(source: pa.Table, semantics: str) -> dict[str, list[int]]:
    from tests.conformance.oracle import matching_ids

    all_ids = source.column("id").to_pylist()
    a, b, c = (matching_ids(source, REUSE_FILTERS[k], semantics) for k in "abc")
    return {"union a+all": a + all_ids, "union all+b": all_ids + b, "join a*b": sorted(set(a) & set(b)),
            "join c*all": c, "repeat all": all_ids, "repeat b": b, "repeat all again": all_ids}

