"""``kstore.spark.merge``: an upsert of a Spark DataFrame (Delta's ``MERGE INTO``), the files
it rewrites rewritten by the executors, ONE commit on the driver; ``update_rows`` and
``delete_rows`` (Delta's ``UPDATE`` and ``DELETE``) the same way.

The source is collected to the driver as Arrow (checked there: columns, types, unique keys,
as :func:`kstore.merge` checks it) and broadcast to the executors; each planned target file
(those its keys may match: partition values, indices, statistics) is one task that reads
the file, applies the merge to its rows and writes the new file
(:func:`kstore.blocks.mutate.rewrite_task`); the driver writes the inserts and commits
(:func:`kstore.blocks.merge.distributed_merge`). A failed job commits nothing and deletes
what its tasks wrote.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from kstore.blocks.merge import MergeRequest, MergeResult, distributed_merge
from kstore.blocks.mutate import RewritePlan, UpdateResult, distributed_rows, rewrite_task
from kstore.core.commit_options import CommitOptions
from kstore.core.metadata import DatasetMetadata
from kstore.core.planning import ReadTask
from kstore.core.predicates import Predicates
from kstore.io.store import Store, StoreLike
from kstore.spark.types import arrow_schema, to_storage
from kstore.spark.writer import spark_store_factory

__all__ = ["merge", "update_rows", "delete_rows"]


class _RewriteFiles:
    """The executor function of a distributed row rewrite (a merge, ``update_rows``,
    ``delete_rows``): rewrite each (number, planned file) it gets."""

    def __init__(self, factory: Callable[[], Store], rewrite: RewritePlan, change: Any, token: str) -> None:
        self.factory, self.rewrite, self.change, self.token = factory, rewrite, change, token

    def __call__(self, items: Iterable[tuple[int, ReadTask]]) -> Iterator[bytes]:
        store = self.factory()
        change = self.change.value  # (a broadcast variable)
        for number, task in items:
            outcome = rewrite_task(store, self.rewrite, change, number, task, self.token)
            yield pickle.dumps((number, outcome), protocol=pickle.HIGHEST_PROTOCOL)


def _on_executors(spark: Any, factory: Callable[[], Store]) -> Callable[[Any, str], list[tuple[int, Any]]]:
    """``run(job, token)``: one task per planned file of ``job`` (in slices), the change
    broadcast once."""
    sc = spark.sparkContext

    def run(job: Any, token: str) -> list[tuple[int, Any]]:
        items = list(enumerate(job.rewrite.tasks))
        change = sc.broadcast(job.change)
        try:
            slices = max(1, min(len(items), sc.defaultParallelism * 2))
            payloads = (sc.parallelize(items, slices)
                        .mapPartitions(_RewriteFiles(factory, job.rewrite.light(), change, token)).collect())
        finally:
            change.unpersist()
        return [pickle.loads(p) for p in payloads]

    return run


def merge(
    spark: Any,
    store: StoreLike,
    dataset_uuid: str,
    source: Any,
    on: str | Sequence[str],
    *,
    when_matched: str = "update",
    when_not_matched: str = "insert",
    when_not_matched_by_source: str = "ignore",
    commit_options: CommitOptions | Any = None,
) -> MergeResult:
    """Merge a Spark DataFrame into a dataset by key, as :func:`kstore.merge` does, with the
    target files rewritten by the executors and ONE commit on the driver.

    Parameters
    ----------
    spark
        The ``SparkSession`` whose executors rewrite the files.
    store
        A path or URL the executors can reach (not ``memory://``).
    dataset_uuid
        The dataset's name.
    source
        A Spark DataFrame with the dataset's columns; collected to the driver (as Arrow) and
        broadcast to the executors: an upsert's changed rows, not a second copy of the table.
    on, when_matched, when_not_matched, when_not_matched_by_source
        As in :func:`kstore.merge`.
    commit_options
        :class:`~kstore.CommitOptions` or a dict (``txn``, ``info``, ``metadata``, ``max_attempts``).

    Returns
    -------
    MergeResult
        The counts and the committed version, as :func:`kstore.merge`.

    Examples
    --------
    With a SparkSession ``spark`` (tested in ``tests/drivers/test_merge_engines.py``)::

        import kstore.spark as ks
        changes = spark.read.parquet("/landing/prices-2024-06-01")
        ks.merge(spark, "/data/store", "prices", changes, on="sku")
    """
    factory = spark_store_factory(store)
    run = _on_executors(spark, factory)
    table = to_storage(list(source.toArrow().to_batches()), arrow_schema(source.schema, dataset=dataset_uuid))
    request = MergeRequest.of(dataset_uuid, on, when_matched, when_not_matched, when_not_matched_by_source)
    return distributed_merge(factory(), dataset_uuid, table, request, CommitOptions.of(commit_options), run)


def update_rows(
    spark: Any,
    store: StoreLike,
    dataset_uuid: str,
    predicates: Predicates,
    set: Any,  # noqa: A002 - kstore.update_rows' name (SQL's SET)
    *,
    commit_options: CommitOptions | Any = None,
) -> UpdateResult:
    """:func:`kstore.update_rows` (Delta's ``UPDATE ... SET ... WHERE``) with the files it
    rewrites rewritten by the executors (one task per planned file: those the predicate may
    match by partition values, indices and statistics) and ONE commit on the driver; a
    failed job commits nothing and deletes what its tasks wrote.

    Parameters
    ----------
    spark
        The ``SparkSession`` whose executors rewrite the files.
    store
        A path or URL the executors can reach (not ``memory://``).
    dataset_uuid
        The dataset's name.
    predicates
        The rows to change (DNF, as for :func:`kstore.read_dataset`); required.
    set
        ``{column: value}``, each value converted exactly to its column's type.
    commit_options
        :class:`~kstore.CommitOptions` or a dict (``txn``, ``info``, ``metadata``, ``max_attempts``).

    Returns
    -------
    UpdateResult
        The committed version, the rows updated, the files read and rewritten.

    Examples
    --------
    With a SparkSession ``spark`` (tested in ``tests/drivers/test_merge_engines.py``)::

        import kstore.spark as ks
        ks.update_rows(spark, "/data/store", "prices", [[("sku", "==", "A-1")]], {"price": 9.5})
    """
    factory = spark_store_factory(store)
    return distributed_rows(factory(), dataset_uuid, predicates, set, CommitOptions.of(commit_options),
                            _on_executors(spark, factory))


def delete_rows(
    spark: Any,
    store: StoreLike,
    dataset_uuid: str,
    predicates: Predicates,
    *,
    commit_options: CommitOptions | Any = None,
) -> DatasetMetadata:
    """:func:`kstore.delete_rows` (Delta's ``DELETE ... WHERE``) with the files it rewrites
    rewritten by the executors and ONE commit on the driver; a failed job commits nothing
    and deletes what its tasks wrote.

    Parameters
    ----------
    spark
        The ``SparkSession`` whose executors rewrite the files.
    store
        A path or URL the executors can reach (not ``memory://``).
    dataset_uuid
        The dataset's name.
    predicates
        The rows to delete (DNF); required.
    commit_options
        :class:`~kstore.CommitOptions` or a dict (``txn``, ``info``, ``metadata``, ``max_attempts``).

    Returns
    -------
    DatasetMetadata
        The committed version (the newest one unchanged when no row matched).

    Examples
    --------
    With a SparkSession ``spark`` (tested in ``tests/drivers/test_merge_engines.py``)::

        import kstore.spark as ks
        ks.delete_rows(spark, "/data/store", "prices", [[("discontinued", "==", True)]])
    """
    factory = spark_store_factory(store)
    return distributed_rows(factory(), dataset_uuid, predicates, None, CommitOptions.of(commit_options),
                            _on_executors(spark, factory)).dataset
