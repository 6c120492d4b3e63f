"""Read-only commands: ls, info, plan, read, history, stats, diff. Each takes ``--json``."""

from __future__ import annotations

import csv
import sys
from typing import Any

import click

from kstore.cli._common import (
    WhereCommand,
    columns_option,
    emit_json,
    jsonable,
    log,
    parse_where,
    table,
    text,
    where_options,
)

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON (dates as ISO 8601 text).")
version_option = click.option("--version", "version", type=click.IntRange(min=0), default=None,
                              help="Read this retained version (default: the newest).")
as_of_option = click.option("--as-of", "as_of", default=None, metavar="TIMESTAMP",
                            help="Read the version current at this ISO 8601 time (naive = UTC).")


@click.command("ls")
@click.argument("store")
@json_option
def ls(store: str, as_json: bool) -> None:
    """List the datasets in STORE (one name per line)."""
    from kstore.core import naming
    from kstore.io.store import open_store

    st = open_store(store)
    found = sorted({u for k in st.iter_prefix("") if (u := naming.dataset_uuid_from_metadata_key(k))})
    if as_json:
        emit_json(found)
    elif found:
        click.echo("\n".join(found))


def _info(store: str, dataset: str, version: int | None) -> dict[str, Any]:
    import kstore

    meta = kstore.load_metadata(store, dataset, version=version)
    schema = kstore.read_schema(store, dataset, version=version)
    return {
        "dataset": meta.uuid, "version": meta.version, "versioned": meta.version is not None,
        "partitions": len(meta.partitions), "partition_keys": list(meta.partition_keys),
        "secondary_indices": sorted(set(meta.indices) | set(meta.inline_indices)),
        "tables": list(meta.tables), "metadata": dict(meta.metadata),
        "schema": [[f.name, str(f.type)] for f in schema],
    }


@click.command("info")
@click.argument("store")
@click.argument("dataset")
@version_option
@json_option
def info(store: str, dataset: str, version: int | None, as_json: bool) -> None:
    """Metadata, schema and indices of DATASET."""
    data = _info(store, dataset, version)
    if as_json:
        emit_json(data)
        return
    rows = [[k, ", ".join(map(str, v)) if isinstance(v, list) else v]
            for k, v in data.items() if k not in ("schema", "metadata")]
    if data["version"] is None:
        rows[1][1] = "none (written by kartothek/plateau: no version history)"
    rows.append(["user metadata keys", ", ".join(sorted(data["metadata"])) or "-"])
    table(f"dataset {dataset!r}", ["", ""], rows)
    table("schema", ["column", "type"], data["schema"])


@click.command("plan", cls=WhereCommand)
@click.argument("store")
@click.argument("dataset")
@where_options
@click.option("--columns", help="Comma-separated columns to read.")
@version_option
@as_of_option
@json_option
def plan(store: str, dataset: str, where: tuple[str, ...], or_: bool, columns: str | None, version: int | None,
         as_of: str | None, as_json: bool) -> None:
    """Plan a query: the files a read would open, pruned by partitions, indices and statistics."""
    import kstore

    p = kstore.plan_read(store, dataset, parse_where(where), columns_option(columns), version=version, as_of=as_of)
    if as_json:
        emit_json({
            "dataset": p.dataset_uuid, "version": p.version, "partitions": p.n_partitions,
            "planned": len(p.tasks), "files": list(p.keys),
            "stages": [{"conjunction": s.conjunction, "kind": s.kind, "column": s.column, "before": s.before,
                        "after": s.after} for s in p.stages],
            "store_calls": dict(p.calls_detail),
        })
        return
    click.echo(p.explain())
    for key in p.keys:
        click.echo(f"  {key}")


@click.command("read", cls=WhereCommand)
@click.argument("store")
@click.argument("dataset")
@where_options
@click.option("--columns", help="Comma-separated columns.")
@version_option
@as_of_option
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="Rows to print (0: all). Files are read only until this many rows are found.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="Output: an aligned text table, CSV with a header row, or JSON (a list of row objects).")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
def read(store: str, dataset: str, where: tuple[str, ...], or_: bool, columns: str | None, version: int | None,
         as_of: str | None, limit: int, fmt: str, as_json: bool) -> None:
    """Read (part of) DATASET: the first --limit matching rows."""
    import pyarrow as pa

    import kstore

    preds, cols = parse_where(where), columns_option(columns)
    parts: list[pa.Table] = []
    rows = 0
    more = False
    frames = kstore.iter_dataset(store, dataset, cols, preds, version=version, as_of=as_of, as_arrow=True)
    try:
        for t in frames:
            assert isinstance(t, pa.Table)
            if limit and rows + t.num_rows >= limit:
                more = rows + t.num_rows > limit
                parts.append(t.slice(0, limit - rows))
                rows = limit
                more = True  # the files after this one were not read: there may be more rows
                break
            parts.append(t)
            rows += t.num_rows
    finally:
        frames.close()  # type: ignore[attr-defined]  # a generator: stop reading files
    log.debug("read %d rows from %d files", rows, len(parts))
    if as_json or fmt == "json":
        emit_json([r for t in parts for r in t.to_pylist()])
        return
    names = parts[0].column_names if parts else list(
        kstore.plan_read(store, dataset, preds, cols, version=version, as_of=as_of).columns)
    records = [[r[c] for c in names] for t in parts for r in t.to_pylist()]
    if fmt == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(names)
        w.writerows([["" if v is None else text(v) for v in r] for r in records])
        return
    table(None, names, records)
    click.echo(f"({rows} rows{'; more not read, --limit 0 reads all' if more else ''})")


@click.command("history")
@click.argument("store")
@click.argument("dataset")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the newest N versions.")
@json_option
def history(store: str, dataset: str, limit: int | None, as_json: bool) -> None:
    """Committed versions of DATASET, oldest first."""
    import kstore

    entries = kstore.history(store, dataset, limit=limit)
    if not entries:  # a dataset kartothek/plateau wrote: no log, one visible state
        meta = kstore.load_metadata(store, dataset)
        note = (f"dataset {dataset!r} has no version history: it was written by kartothek/plateau (no kstore log); "
                f"its current state has {len(meta.partitions)} partitions. `kstore upgrade` starts a history.")
        if as_json:
            emit_json({"dataset": dataset, "versioned": False, "partitions": len(meta.partitions), "versions": []})
        else:
            click.echo(note)
        return
    if as_json:
        emit_json({"dataset": dataset, "versioned": True, "versions": [
            {"version": h.version, "timestamp": h.timestamp, "operation": h.operation, "partitions": h.n_partitions,
             "added": len(h.added), "removed": len(h.removed), "rows_added": h.rows_added, "writer": h.writer,
             "txn": list(h.txn) if h.txn else None} for h in entries]})
        return
    table(f"dataset {dataset!r}", ["version", "timestamp", "operation", "partitions", "+added", "-removed",
                                   "rows added", "writer"],
          [[h.version, h.timestamp.isoformat(), h.operation, h.n_partitions, len(h.added), len(h.removed),
            h.rows_added, h.writer] for h in entries])


def _stats(store: str, dataset: str, version: int | None) -> tuple[Any, Any]:
    from kstore.eager import load_metadata, plan_with_stats

    meta = load_metadata(store, dataset, version=version)
    plan, stats = plan_with_stats(store, dataset, version=version, stats=True)
    return meta, (plan, stats)


@click.command("stats")
@click.argument("store")
@click.argument("dataset")
@version_option
@click.option("--files", "per_file", is_flag=True, help="Also list every file (rows, bytes).")
@json_option
def stats(store: str, dataset: str, version: int | None, per_file: bool, as_json: bool) -> None:
    """Per-file statistics of DATASET, summarized per column (min, max, nulls)."""
    meta, (plan, st) = _stats(store, dataset, version)
    files = [{"partition": t.label, "key": t.key} for t in plan.tasks]
    if st is None:
        msg = f"dataset {dataset!r} has no statistics file (written by kartothek/plateau, or before kstore kept them)"
        if as_json:
            emit_json({"dataset": dataset, "version": meta.version, "files": len(files), "rows": None,
                       "columns": [], "note": msg})
        else:
            click.echo(f"{msg}; {len(files)} files")
        return
    by_label = {lab: i for i, lab in enumerate(st.column("label").to_pylist())}
    rows_col, bytes_col = st.column("rows").to_pylist(), st.column("bytes").to_pylist()
    for f in files:
        i = by_label.get(f["partition"])
        f["rows"] = rows_col[i] if i is not None else None
        f["bytes"] = bytes_col[i] if i is not None else None
    columns = []
    for name in plan.schema.names:
        if f"nulls:{name}" not in st.column_names:  # partition columns (in the keys) and unorderable types
            columns.append({"column": name, "type": str(plan.schema.field(name).type), "min": None, "max": None,
                            "nulls": None, "partition_column": name in meta.partition_keys})
            continue
        import pyarrow.compute as pc

        lo, hi = pc.min(st.column(f"min:{name}")).as_py(), pc.max(st.column(f"max:{name}")).as_py()
        nulls = st.column(f"nulls:{name}")
        columns.append({"column": name, "type": str(plan.schema.field(name).type), "min": lo, "max": hi,
                        "nulls": pc.sum(nulls).as_py() if nulls.null_count == 0 else None,
                        "partition_column": False})
    total_rows = sum(r for r in rows_col if r is not None)
    total_bytes = sum(b for b in bytes_col if b is not None)
    if as_json:
        out: dict[str, Any] = {"dataset": dataset, "version": meta.version, "files": len(files), "rows": total_rows,
                               "bytes": total_bytes, "columns": columns}
        if per_file:
            out["per_file"] = files
        emit_json(out)
        return
    click.echo(f"dataset {dataset!r}: {len(files)} files, {total_rows} rows, {total_bytes} bytes")
    table("columns", ["column", "type", "min", "max", "nulls"],
          [[c["column"], c["type"] + (" (partition)" if c["partition_column"] else ""),
            "-" if c["min"] is None else c["min"], "-" if c["max"] is None else c["max"],
            "-" if c["nulls"] is None else c["nulls"]] for c in columns])
    if per_file:
        table("files", ["partition", "rows", "bytes"], [[f["partition"], f["rows"], f["bytes"]] for f in files])


@click.command("diff")
@click.argument("store")
@click.argument("dataset")
@click.argument("from_version", type=click.IntRange(min=0))
@click.argument("to_version", type=click.IntRange(min=0))
@json_option
def diff(store: str, dataset: str, from_version: int, to_version: int, as_json: bool) -> None:
    """Partitions added and removed between two versions of DATASET, with their rows."""
    import kstore
    from kstore.eager import plan_with_stats

    kstore.load_metadata(store, dataset)  # a missing store or dataset says so (not "no version N")
    d = kstore.diff(store, dataset, from_version, to_version)

    def rows_of(version: int, labels: tuple[str, ...]) -> int | None:
        if not labels:
            return 0
        _, st = plan_with_stats(store, dataset, version=version, stats=True)
        if st is None:
            return None
        counts = dict(zip(st.column("label").to_pylist(), st.column("rows").to_pylist()))
        got = [counts.get(lab) for lab in labels]
        return None if any(r is None for r in got) else sum(int(r) for r in got if r is not None)

    added_rows, removed_rows = rows_of(to_version, d.added), rows_of(from_version, d.removed)
    if as_json:
        emit_json({"dataset": dataset, "from_version": from_version, "to_version": to_version,
                   "added": list(d.added), "removed": list(d.removed), "rows_added": added_rows,
                   "rows_removed": removed_rows})
        return
    click.echo(f"dataset {dataset!r}: version {from_version} -> {to_version}: +{len(d.added)} partitions "
               f"({'?' if added_rows is None else added_rows} rows), -{len(d.removed)} partitions "
               f"({'?' if removed_rows is None else removed_rows} rows)")
    if d.added or d.removed:
        table(None, ["", "partition"], [["+", lab] for lab in d.added] + [["-", lab] for lab in d.removed])


__all__ = ["ls", "info", "plan", "read", "history", "stats", "diff", "jsonable"]
