"""The ``kstore`` command line: inspect, query and maintain datasets.

Examples (shell)::

    kstore ls ./store
    kstore info ./store sales
    kstore plan ./store sales --where "location == 7" --where "day >= 2024-01-20"
    kstore read ./store sales --where "location in [7, 8]" --columns day,location --limit 5
    kstore history ./store sales
    kstore gc ./store sales --retention-days 7 --dry-run
    kstore build-indices ./store sales product

``--where`` terms are ANDed; ``--or`` starts a new conjunction. Values are Python
literals (``7``, ``'x'``, ``[1, 2]``, ``None``) or bare text (dates and timestamps as ISO text
are converted to the column type by the planner).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from datetime import timedelta
from typing import Any, TextIO

__all__ = ["main", "parse_where"]

_TERM = re.compile(r"^\s*(?P<col>[^\s]+)\s+(?P<op>==|!=|<=|>=|<|>|=|not in|in|is not null|is null)\s*(?P<val>.*)$",
                   re.IGNORECASE)


def _literal(text: str) -> Any:
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_where(terms: list[str]) -> list[list[tuple[Any, ...]]] | None:
    """``["a == 1", "--or", "b in [1, 2]"]`` -> DNF predicates.

    >>> parse_where(["x == 1", "y is null", "--or", "z in [1, 2]"])
    [[('x', '==', 1), ('y', 'is null')], [('z', 'in', [1, 2])]]
    """
    from kstore.errors import InvalidPredicateError

    if not terms:
        return None
    dnf: list[list[tuple[Any, ...]]] = [[]]
    for raw in terms:
        if raw == "--or":
            dnf.append([])
            continue
        m = _TERM.match(raw)
        if not m:
            raise InvalidPredicateError(f"cannot parse --where {raw!r}; write 'column op value', e.g. 'x == 3'")
        op = m.group("op").lower()
        if op in ("is null", "is not null"):
            dnf[-1].append((m.group("col"), op))
        else:
            dnf[-1].append((m.group("col"), op, _literal(m.group("val"))))
    return [c for c in dnf if c]


def _retention_days(text: str) -> timedelta:
    try:
        days = float(text)
        if not days >= 0:
            raise ValueError(text)
        return timedelta(days=days)
    except (ValueError, OverflowError) as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of days between 0 and {timedelta.max.days}"
        ) from exc


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kstore", description="Inspect, query and maintain kstore datasets.")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, help_: str, uuid: bool = True) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("store", help="store URL or directory")
        if uuid:
            sp.add_argument("dataset", help="dataset uuid")
        return sp

    add("ls", "list the datasets in a store", uuid=False)
    add("info", "metadata, schema and indices of a dataset")
    for name in ("plan", "read"):
        sp = add(name, "plan a query" if name == "plan" else "read (part of) a dataset")
        sp.add_argument("--where", action="append", default=[], help="predicate term 'col op value'")
        sp.add_argument("--or", dest="where", action="append_const", const="--or", help="start a new conjunction")
        sp.add_argument("--columns", help="comma-separated columns")
        sp.add_argument("--version", type=int)
        if name == "read":
            sp.add_argument("--limit", type=int, default=20)
            sp.add_argument("--format", choices=["table", "csv", "json"], default="table")
    add("history", "committed versions")
    sp = add("gc", "garbage collect unreferenced files")
    sp.add_argument("--retention-days", type=_retention_days, default=timedelta(days=7),
                    help="keep versions younger than this many days (>= 0, fractions allowed)")
    sp.add_argument("--dry-run", action="store_true")
    sp.add_argument("--allow-short-retention", action="store_true",
                    help="allow a retention below 7 days (can fail long-running writes and reads)")
    sp = add("build-indices", "build secondary indices")
    sp.add_argument("columns", nargs="+")
    add("delete", "delete a dataset")
    add("upgrade", "turn a kartothek/plateau dataset into a versioned kstore dataset")
    return p


def _run(args: argparse.Namespace, out: TextIO) -> int:
    import kstore
    from kstore.core import naming
    from kstore.io.store import open_store

    if args.command == "ls":
        st = open_store(args.store)
        found = sorted({u for k in st.iter_prefix("") if (u := naming.dataset_uuid_from_metadata_key(k))})
        print("\n".join(found), file=out)
        return 0
    if args.command == "info":
        meta = kstore.load_metadata(args.store, args.dataset)
        schema = kstore.read_schema(args.store, args.dataset)
        info = {
            "dataset": meta.uuid, "version": meta.version, "partitions": len(meta.partitions),
            "partition_keys": list(meta.partition_keys), "secondary_indices": sorted(meta.indices),
            "tables": list(meta.tables), "metadata": dict(meta.metadata),
            "schema": [[f.name, str(f.type)] for f in schema],
        }
        print(json.dumps(info, indent=2, default=str), file=out)
        return 0
    if args.command in ("plan", "read"):
        preds = parse_where(args.where)
        cols = args.columns.split(",") if args.columns else None
        if args.command == "plan":
            plan = kstore.plan_read(args.store, args.dataset, preds, cols, version=args.version)
            print(plan.explain(), file=out)
            for key in plan.keys:
                print(f"  {key}", file=out)
            return 0
        df = kstore.read_dataset(args.store, args.dataset, cols, preds, version=args.version)
        shown = df.head(args.limit) if args.limit else df
        if args.format == "csv":
            shown.to_csv(out, index=False)
        elif args.format == "json":
            print(shown.to_json(orient="records", date_format="iso"), file=out)
        else:
            print(shown.to_string(index=False), file=out)
            print(f"({len(df)} rows)", file=out)
        return 0
    if args.command == "history":
        for h in kstore.history(args.store, args.dataset):
            print(f"{h.version:>6}  {h.timestamp.isoformat()}  {h.operation:<20} +{len(h.added)} -{len(h.removed)} "
                  f"partitions, {h.rows_added} rows  ({h.writer})", file=out)
        return 0
    if args.command == "gc":
        res = kstore.garbage_collect(args.store, args.dataset, retention=args.retention_days, dry_run=args.dry_run,
                                     enforce_retention_duration=not args.allow_short_retention)
        verb = "would delete" if res.dry_run else "deleted"
        print(f"{verb} {len(res.deleted_files)} files, expired versions {list(res.expired_versions)}, "
              f"retained {list(res.retained_versions)}", file=out)
        return 0
    if args.command == "build-indices":
        meta = kstore.build_indices(args.store, args.dataset, args.columns)
        print(f"version {meta.version}: indices {sorted(meta.indices)}", file=out)
        return 0
    if args.command == "delete":
        print(f"deleted {kstore.delete_dataset(args.store, args.dataset)} keys", file=out)
        return 0
    if args.command == "upgrade":
        meta = kstore.upgrade_dataset(args.store, args.dataset)
        print(f"dataset {meta.uuid!r} is at version {meta.version}", file=out)
        return 0
    raise AssertionError(args.command)  # pragma: no cover - argparse restricts commands


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``kstore`` console script; returns the exit code."""
    from kstore.errors import KstoreError

    out = out or sys.stdout
    args = _parser().parse_args(argv)
    try:
        return _run(args, out)
    except KstoreError as exc:
        print(f"kstore: error: {exc}", file=sys.stderr)
        return 2
