"""Commands that change a store: gc, delete (destructive: --dry-run / --yes), copy,
compact, build-indices, restore, upgrade."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import click

from kstore.cli._common import (
    Command,
    UserError,
    Where,
    WhereCommand,
    confirm_or_refuse,
    emit_json,
    log,
    progress,
    where_options,
)

if TYPE_CHECKING:
    from kstore.blocks.compact import CompactionPlan


class RetentionDays(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """A number of days >= 0 (fractions allowed) up to ``timedelta.max``."""

    name = "days"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            days = float(str(value))
            if not (math.isfinite(days) and days >= 0):
                raise ValueError(value)
            return timedelta(days=days)
        except (ValueError, OverflowError):
            self.fail(f"{value!r} is not a number of days between 0 and {timedelta.max.days}", param, ctx)


class MiB(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """A size in MiB: a finite number > 0 (fractions allowed) of at least one byte; ``nan``,
    ``inf`` and ``-1`` are usage errors, not a traceback."""

    name = "mib"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            mib = float(value if isinstance(value, (int, float)) else str(value))
        except (ValueError, OverflowError):
            mib = math.nan
        if not (math.isfinite(mib) and mib * 2**20 >= 1):
            self.fail(f"{value!r} is not a size in MiB: give a finite number greater than 0 (at least one byte)",
                      param, ctx)
        return mib


@click.command("gc", cls=Command)
@click.argument("store")
@click.argument("dataset")
@click.option("--retention-days", type=RetentionDays(), default="7", show_default=True,
              help="Keep versions younger than this many days (>= 0, fractions allowed).")
@click.option("--log-retention-days", type=RetentionDays(), default="30", show_default=True,
              help="Keep listing expired versions in history for this many days (>= 0).")
@click.option("--dry-run", is_flag=True, default=False, help="Only say what would be deleted and expired.")
@click.option("--yes", "-y", is_flag=True, default=False, help="Delete without asking (needed when not interactive).")
@click.option("--allow-short-retention", is_flag=True, default=False,
              help="Allow a retention below 7 days (can fail long-running writes and reads).")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the result as JSON.")
def gc(store: str, dataset: str, retention_days: timedelta, log_retention_days: timedelta, dry_run: bool, yes: bool,
       allow_short_retention: bool, as_json: bool) -> None:
    """Garbage-collect DATASET: expire old versions, delete files nothing retained uses."""
    import kstore
    from kstore.io.progress import ProgressStore

    st = kstore.open_store(store)

    def run(target: kstore.StoreLike, dry: bool) -> kstore.GCResult:
        return kstore.garbage_collect(target, dataset, retention=retention_days, dry_run=dry,
                                      enforce_retention_duration=not allow_short_retention,
                                      log_retention=log_retention_days)

    res = run(st, True)
    if not dry_run:
        if res.deleted_files or res.expired_versions:
            confirm_or_refuse(yes, f"garbage-collect dataset {dataset!r}: delete {len(res.deleted_files)} files "
                                   f"and expire versions {list(res.expired_versions)}")
        with progress(f"gc {dataset}", len(res.deleted_files) or None) as advance:
            res = run(ProgressStore(st, "delete", advance), False)
    log.info("gc %s: %d files, expired %s", dataset, len(res.deleted_files), res.expired_versions)
    if as_json:
        emit_json({"dataset": dataset, "dry_run": res.dry_run, "deleted_files": list(res.deleted_files),
                   "expired_versions": list(res.expired_versions), "retained_versions": list(res.retained_versions),
                   "fence_version": res.fence_version})
        return
    verb = "would delete" if res.dry_run else "deleted"
    click.echo(f"{verb} {len(res.deleted_files)} files, expired versions {list(res.expired_versions)}, "
               f"retained {list(res.retained_versions)}")
    if res.dry_run:
        for key in res.deleted_files:
            click.echo(f"  {key}")


def _dataset_keys(store: object, dataset: str) -> list[str]:
    """The keys ``delete`` removes: every key of the dataset but its log, plus its main file."""
    from kstore.core import naming
    from kstore.io.store import Store

    assert isinstance(store, Store)
    naming.validate_name(dataset)
    log_prefix = naming.log_prefix(dataset)
    keys = [k for k in store.iter_prefix(naming.dataset_prefix(dataset)) if not k.startswith(log_prefix)]
    keys += [naming.metadata_key(dataset, f) for f in naming.METADATA_FORMATS
             if store.exists(naming.metadata_key(dataset, f))]
    return sorted(keys)


@click.command("delete", cls=Command)
@click.argument("store")
@click.argument("dataset")
@click.option("--dry-run", is_flag=True, default=False, help="Only list what would be deleted.")
@click.option("--yes", "-y", is_flag=True, default=False, help="Delete without asking (needed when not interactive).")
def delete(store: str, dataset: str, dry_run: bool, yes: bool) -> None:
    """Delete DATASET: data, indices, statistics and metadata (a small log entry stays)."""
    import kstore
    from kstore.errors import DatasetNotFoundError
    from kstore.io.progress import ProgressStore

    st = kstore.open_store(store)
    keys = _dataset_keys(st, dataset)
    if not keys:
        raise DatasetNotFoundError(f"dataset {dataset!r} does not exist")
    if dry_run:
        click.echo(f"would delete {len(keys)} keys of dataset {dataset!r}")
        for key in keys:
            click.echo(f"  {key}")
        return
    confirm_or_refuse(yes, f"delete dataset {dataset!r} ({len(keys)} keys)")
    with progress(f"delete {dataset}", len(keys)) as advance:
        n = kstore.delete_dataset(ProgressStore(st, "delete", advance), dataset)
    click.echo(f"deleted {n} keys")


@click.command("copy", cls=Command)
@click.argument("store")
@click.argument("dataset")
@click.option("--to", "target", default=None, metavar="STORE", help="Target store (default: the same store).")
@click.option("--as", "new_name", default=None, metavar="DATASET", help="Name of the copy (default: the same).")
def copy(store: str, dataset: str, target: str | None, new_name: str | None) -> None:
    """Copy the current version of DATASET to another store and/or name (files are copied)."""
    import kstore
    from kstore.io.progress import ProgressStore
    from kstore.io.redact import redact_url

    if target is None and new_name is None:
        raise UserError("copy needs --to STORE and/or --as DATASET")
    src = kstore.open_store(store)
    meta = kstore.load_metadata(src, dataset)
    n_files = sum(len(tables) for tables in meta.partitions.values())
    dst = kstore.open_store(target) if target is not None else src
    with progress(f"copy {dataset}", n_files or None) as advance:
        copied = kstore.copy_dataset(src, dataset, ProgressStore(dst, "put", advance), new_name)
    click.echo(f"copied dataset {dataset!r} ({n_files} files) to {copied.uuid!r}"
               + (f" in {redact_url(target)}" if target is not None else "") + f", version {copied.version}")


@click.command("compact", cls=WhereCommand)
@click.argument("store")
@click.argument("dataset")
@click.option("--target-mb", type=MiB(), default=128.0, show_default=True,
              help="Target size of the merged files, in MiB.")
@click.option("--min-files", type=click.IntRange(min=2), default=2, show_default=True,
              help="Leave partitions with fewer small files than this alone.")
@click.option("--sort-by", "sort_by", multiple=True, default=None, metavar="COLUMN",
              help="Sort rows in the new files (clustering).")
@click.option("--dry-run", is_flag=True, default=False, help="Only show which files would be merged.")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the plan or result as JSON.")
@where_options
def compact(store: str, dataset: str, target_mb: float, min_files: int, sort_by: tuple[str, ...], dry_run: bool,
            as_json: bool, where: Where, or_: bool) -> None:
    """Merge the small files of each partition of DATASET into files of up to --target-mb,
    in one commit (concurrent appends are kept; replaced files stay until gc). --where
    limits it to the files a predicate plans (e.g. --where 'day >= 2024-01-01')."""
    import kstore

    predicates = where

    def run(dry: bool, advance: Callable[[], None] | None = None) -> CompactionPlan:
        return kstore.compact(store, dataset, target_file_size=int(target_mb * 2**20), min_files=min_files,
                              predicates=predicates, sort_by=list(sort_by) or None, dry_run=dry,
                              progress=(lambda done, total: advance()) if advance is not None else None)

    plan = run(True)
    if not dry_run and plan.groups:
        with progress(f"compact {dataset}", len(plan.groups)) as advance:
            plan = run(False, advance)
    log.info("compact %s: %d files -> %d", dataset, plan.files_in, plan.files_out)
    if as_json:
        emit_json({"dataset": dataset, "dry_run": dry_run, "version": plan.committed, "files_in": plan.files_in,
                   "files_out": plan.files_out, "bytes_in": plan.bytes_in, "rows": plan.rows,
                   "partitions": plan.partitions})
        return
    if not plan.groups:
        click.echo(f"nothing to compact in dataset {dataset!r} (no partition has {min_files} files under "
                   f"{target_mb:g} MiB)")
        return
    verb = "would merge" if dry_run else "merged"
    click.echo(f"{verb} {plan.files_in} files into {plan.files_out} in {len(plan.partitions)} partition(s)"
               + ("" if dry_run else f": version {plan.committed}"))


@click.command("build-indices", cls=Command)
@click.argument("store")
@click.argument("dataset")
@click.argument("columns", nargs=-1, required=True)
def build_indices(store: str, dataset: str, columns: tuple[str, ...]) -> None:
    """Build secondary indices of COLUMNS over every partition of DATASET."""
    import kstore

    meta = kstore.build_indices(store, dataset, list(columns))
    click.echo(f"version {meta.version}: indices {sorted(meta.indices)}")


@click.command("restore", cls=Command)
@click.argument("store")
@click.argument("dataset")
@click.option("--version", "version", type=click.IntRange(min=0), default=None,
              help="The retained version to restore (see `kstore history`).")
@click.option("--as-of", "as_of", default=None, metavar="TIMESTAMP",
              help="Or: the version that was current at this ISO 8601 time (naive = UTC).")
def restore(store: str, dataset: str, version: int | None, as_of: str | None) -> None:
    """Make an older retained version of DATASET the newest again (a new version; nothing is rewritten)."""
    import kstore
    from kstore.lifecycle import resolve_version

    if version is None and as_of is None:
        raise UserError("give --version or --as-of: the version to restore")
    target = resolve_version(store, dataset, version=version, as_of=as_of)
    meta = kstore.restore(store, dataset, target)
    if meta.version == target:
        click.echo(f"version {target} is the newest version already: nothing to restore")
    else:
        click.echo(f"version {meta.version}: restores version {target}")


@click.command("upgrade", cls=Command)
@click.argument("store")
@click.argument("dataset")
def upgrade(store: str, dataset: str) -> None:
    """Turn a kartothek/plateau dataset into a versioned kstore dataset (no data rewritten)."""
    import kstore

    meta = kstore.upgrade_dataset(store, dataset)
    click.echo(f"dataset {meta.uuid!r} is at version {meta.version}")


__all__ = ["gc", "delete", "copy", "compact", "build_indices", "restore", "upgrade", "RetentionDays", "MiB"]
