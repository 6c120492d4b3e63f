"""Read-only commands: ls, info, plan, read, history, stats, diff. Each takes ``--json``."""

from __future__ import annotations

import csv
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from kstore.cli._common import (
    Command,
    Where,
    WhereCommand,
    columns_option,
    count,
    emit_json,
    jsonable,
    log,
    table,
    text,
    where_options,
)

if TYPE_CHECKING:
    from kstore.blocks.history import HistoryEntry

json_option = click.option("--json", "as_json", is_flag=True, default=False,
                           help="Print JSON (dates as ISO 8601 text).")
version_option = click.option("--version", "version", type=click.IntRange(min=0), default=None,
                              help="Read this retained version (default: the newest).")
as_of_option = click.option("--as-of", "as_of", default=None, metavar="TIMESTAMP",
                            help="Read the version current at this ISO 8601 time (naive = UTC).")


@click.command("ls", cls=Command)
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


def file_counts(partitions: Mapping[str, Mapping[str, str]], partition_keys: Sequence[str],
                n_tables: int) -> tuple[int, int]:
    """(data files, partitions) of one version, from its ``label -> {table: key}`` mapping (no
    store call). A partition is one value of the partition keys (``day=2024-01-02``), holding one
    or more files; a dataset without partition keys has none."""
    n_files = len(partitions) if n_tables <= 1 else sum(len(files) for files in partitions.values())
    if not partition_keys:
        return n_files, 0
    # a label is '<col>=<value>/.../<file id>': the partition is all but the file id
    return n_files, len({label.rpartition("/")[0] for label in partitions})


def _info(store: str, dataset: str, version: int | None) -> dict[str, Any]:
    import kstore

    meta = kstore.load_metadata(store, dataset, version=version)
    schema = kstore.read_schema(store, dataset, version=version)
    n_files, n_partitions = file_counts(meta.partitions, meta.partition_keys, len(meta.tables))
    return {
        "dataset": meta.uuid, "version": meta.version, "versioned": meta.version is not None,
        "files": n_files, "partitions": n_partitions, "partition_keys": list(meta.partition_keys),
        "secondary_indices": sorted(set(meta.indices) | set(meta.inline_indices)),
        "tables": list(meta.tables), "metadata": dict(meta.metadata),
        "schema": [[f.name, str(f.type)] for f in schema],
    }


@click.command("info", cls=Command)
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
    shown = dict(data)
    if data["version"] is None:
        shown["version"] = "none (written by kartothek/plateau: no version history)"
    if not data["partition_keys"]:
        shown["partitions"] = "- (not partitioned)"
        shown["partition_keys"] = "-"
    rows = [[k, ", ".join(map(str, v)) if isinstance(v, list) else v]
            for k, v in shown.items() if k not in ("schema", "metadata")]
    rows.append(["user metadata keys", ", ".join(sorted(data["metadata"])) or "-"])
    table(f"dataset {dataset!r}", ["", ""], rows)
    table("schema", ["column", "type"], data["schema"])


@click.command("plan", cls=WhereCommand)
@click.argument("store")
@click.argument("dataset")
@where_options
@click.option("--columns", default=None, help="Comma-separated columns to read (default: all).")
@version_option
@as_of_option
@json_option
def plan(store: str, dataset: str, where: Where, or_: bool, columns: str | None, version: int | None,
         as_of: str | None, as_json: bool) -> None:
    """Plan a query: the files a read would open, pruned by partitions, indices and statistics."""
    import kstore

    p = kstore.plan_read(store, dataset, columns_option(columns), where, version=version, as_of=as_of)
    # the partitions (partition values) the planned files are in; None without partition keys
    planned_partitions = (len({t.partition_values for t in p.tasks})
                          if any(t.partition_values for t in p.tasks) else None)
    if as_json:
        emit_json({
            "dataset": p.dataset_uuid, "version": p.version, "total_files": p.n_files,
            "planned": len(p.tasks), "planned_partitions": planned_partitions, "files": list(p.keys),
            "stages": [{"conjunction": s.conjunction, "kind": s.kind, "column": s.column, "before": s.before,
                        "after": s.after} for s in p.stages],
            "store_calls": dict(p.calls_detail),
        })
        return
    # ReadPlan.explain() in the command line's words: its counts are files
    click.echo(f"dataset {p.dataset_uuid!r}" + (f" version {p.version}" if p.version is not None else "")
               + f": {count(p.n_files, 'file')} -> {len(p.tasks)} planned"
               + (f" (in {count(planned_partitions, 'partition')})" if planned_partitions is not None else ""))
    for s in p.stages:
        click.echo(f"  conjunction {s.conjunction}: {s.kind} {s.column}: {s.before} -> {s.after} files")
    if p.store_calls:
        detail = ", ".join(f"{k} {v}" for k, v in sorted(p.calls_detail.items()))
        click.echo(f"  planning store calls: {p.store_calls} ({detail})")
    for key in p.keys:
        click.echo(f"  {key}")


@click.command("read", cls=WhereCommand)
@click.argument("store")
@click.argument("dataset")
@where_options
@click.option("--columns", default=None, help="Comma-separated columns (default: all).")
@version_option
@as_of_option
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="Rows to print (0: all). Files are read only until this many rows are found.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="Output: an aligned text table, CSV with a header row, or JSON (a list of row objects).")
@click.option("--json", "as_json", is_flag=True, default=False, help="Same as --format json.")
def read(store: str, dataset: str, where: Where, or_: bool, columns: str | None, version: int | None,
         as_of: str | None, limit: int, fmt: str, as_json: bool) -> None:
    """Read (part of) DATASET: the first --limit matching rows."""
    import pyarrow as pa

    import kstore

    preds, cols = where, columns_option(columns)
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
        kstore.plan_read(store, dataset, cols, preds, version=version, as_of=as_of).columns)
    records = [[r[c] for c in names] for t in parts for r in t.to_pylist()]
    if fmt == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(names)
        w.writerows([["" if v is None else text(v) for v in r] for r in records])
        return
    table(None, names, records)
    click.echo(f"({rows} rows{'; more not read, --limit 0 reads all' if more else ''})")


@click.command("history", cls=Command)
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
        n_files, n_partitions = file_counts(meta.partitions, meta.partition_keys, len(meta.tables))
        note = (f"dataset {dataset!r} has no version history: it was written by kartothek/plateau (no kstore log); "
                f"its current state has {count(n_files, 'file')}"
                + (f" in {count(n_partitions, 'partition')}" if meta.partition_keys else "")
                + ". `kstore upgrade` starts a history.")
        if as_json:
            emit_json({"dataset": dataset, "versioned": False, "files": n_files, "partitions": n_partitions,
                       "versions": []})
        else:
            click.echo(note)
        return
    if as_json:
        emit_json({"dataset": dataset, "versioned": True, "versions": [
            {"version": h.version, "timestamp": h.timestamp, "operation": h.operation, "files": h.n_files,
             "added": len(h.added), "removed": len(h.removed),
             "rows_added": 0 if h.operation in REWRITES else h.rows_added,
             "rows_rewritten": h.rows_added if h.operation in REWRITES else 0,
             "writer": h.writer, "txn": list(h.txn) if h.txn else None, "info": h.info, "expired": h.expired}
            for h in entries]})
        return
    notes = [_history_note(h) for h in entries]
    columns = ["version", "timestamp", "operation", "files", "+files", "-files", "rows added", "writer"]
    rows = [[h.version, h.timestamp.isoformat(), h.operation + (" (expired)" if h.expired else ""), h.n_files,
             len(h.added), len(h.removed),
             "-" if h.operation in REWRITES else h.rows_added, h.writer] for h in entries]
    if any(notes):
        columns.append("notes")
        rows = [[*r, n] for r, n in zip(rows, notes)]
    table(f"dataset {dataset!r}", columns, rows)


#: operations that rewrite files: the rows of the files they write are no new rows
REWRITES = ("compaction", "delete_rows", "update", "merge")


def _history_note(h: HistoryEntry) -> str:
    """What a rewrite did, in files (from the entry's info where it has the counts)."""
    if h.operation == "compaction":
        files_in, files_out = h.info.get("files_in", len(h.removed)), h.info.get("files_out", len(h.added))
        return f"merged {count(files_in, 'file')} into {files_out} ({count(h.rows_added, 'row')} rewritten)"
    if h.operation in ("delete_rows", "update", "merge"):
        kept = "kept in them" if h.operation == "delete_rows" else "in them"
        rows = ", ".join(f"{k} {h.info[k]}" for k in ("inserted", "updated", "deleted") if k in h.info)
        return (f"{rows + ': ' if rows else ''}rewrote {count(len(h.removed), 'file')} into {len(h.added)} "
                f"({count(h.rows_added, 'row')} {kept})")
    return ""


def _stats(store: str, dataset: str, version: int | None) -> tuple[Any, Any]:
    from kstore.eager import load_metadata, plan_with_stats

    meta = load_metadata(store, dataset, version=version)
    plan, stats = plan_with_stats(store, dataset, version=version, stats=True)
    return meta, (plan, stats)


@click.command("stats", cls=Command)
@click.argument("store")
@click.argument("dataset")
@version_option
@click.option("--files", "per_file", is_flag=True, default=False, help="Also list every file (rows, bytes).")
@json_option
def stats(store: str, dataset: str, version: int | None, per_file: bool, as_json: bool) -> None:
    """Per-file statistics of DATASET, summarized per column (min, max, nulls)."""
    meta, (plan, st) = _stats(store, dataset, version)
    files = [{"label": t.label, "key": t.key} for t in plan.tasks]
    _, n_partitions = file_counts(meta.partitions, meta.partition_keys, len(meta.tables))
    in_partitions = f" in {count(n_partitions, 'partition')}" if meta.partition_keys else ""
    if st is None:
        msg = f"dataset {dataset!r} has no statistics file (written by kartothek/plateau, or before kstore kept them)"
        if as_json:
            emit_json({"dataset": dataset, "version": meta.version, "files": len(files), "partitions": n_partitions,
                       "rows": None, "columns": [], "note": msg})
        else:
            click.echo(f"{msg}; {len(files)} files{in_partitions}")
        return
    by_label = {lab: i for i, lab in enumerate(st.column("label").to_pylist())}
    rows_col, bytes_col = st.column("rows").to_pylist(), st.column("bytes").to_pylist()
    for f in files:
        i = by_label.get(f["label"])
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
        out: dict[str, Any] = {"dataset": dataset, "version": meta.version, "files": len(files),
                               "partitions": n_partitions, "rows": total_rows, "bytes": total_bytes,
                               "columns": columns}
        if per_file:
            out["per_file"] = files
        emit_json(out)
        return
    click.echo(f"dataset {dataset!r}: {len(files)} files{in_partitions}, {total_rows} rows, {total_bytes} bytes")
    table("columns", ["column", "type", "min", "max", "nulls"],
          [[c["column"], c["type"] + (" (partition key)" if c["partition_column"] else ""),
            "-" if c["min"] is None else c["min"], "-" if c["max"] is None else c["max"],
            "-" if c["nulls"] is None else c["nulls"]] for c in columns])
    if per_file:
        table("files", ["file", "rows", "bytes"], [[f["label"], f["rows"], f["bytes"]] for f in files])


@click.command("diff", cls=Command)
@click.argument("store")
@click.argument("dataset")
@click.argument("from_version", type=click.IntRange(min=0))
@click.argument("to_version", type=click.IntRange(min=0))
@json_option
def diff(store: str, dataset: str, from_version: int, to_version: int, as_json: bool) -> None:
    """Files added and removed between two versions of DATASET, with their rows."""
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
    click.echo(f"dataset {dataset!r}: version {from_version} -> {to_version}: +{count(len(d.added), 'file')} "
               f"({'?' if added_rows is None else added_rows} rows), -{count(len(d.removed), 'file')} "
               f"({'?' if removed_rows is None else removed_rows} rows)")
    if d.added or d.removed:
        table(None, ["", "file"], [["+", lab] for lab in d.added] + [["-", lab] for lab in d.removed])


__all__ = ["ls", "info", "plan", "read", "history", "stats", "diff", "jsonable", "file_counts"]
