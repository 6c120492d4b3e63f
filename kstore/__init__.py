"""kstore: tabular datasets on object stores and file systems, kartothek-format compatible.

Public API (engines live in :mod:`kstore.dask` and :mod:`kstore.spark`)::

    open_dataset, store_dataset, update_dataset, read_dataset, read_table, iter_dataset, plan_read,
    load_metadata, read_schema, index_lookup, build_indices, drop_indices, compact, delete_rows, history,
    diff, garbage_collect, delete_dataset, copy_dataset, upgrade_dataset, open_store, WriteOptions,
    CommitOptions,
    S3Store (``S3Store.from_options(url, storage_options)``)

Types for annotations: ``Store`` (the store protocol), ``StoreLike`` (what every ``store``
argument accepts), ``Predicates``, ``AsOf``, and the results ``DatasetMetadata``,
``ReadPlan``, ``HistoryEntry``, ``Diff``, ``GCResult``.
"""

import logging as _logging

from kstore._version import __version__
from kstore.blocks.gc import GCResult
from kstore.blocks.history import Diff, HistoryEntry
from kstore.blocks.snapshot import Snapshot
from kstore.core.arguments import AsOf
from kstore.core.commit_options import CommitOptions
from kstore.core.metadata import DatasetMetadata
from kstore.core.planning import ReadPlan
from kstore.core.predicates import Predicates
from kstore.core.writer_options import WriteOptions
from kstore.eager import (
    index_lookup,
    iter_dataset,
    load_metadata,
    open_dataset,
    plan_read,
    read_dataset,
    read_schema,
    read_table,
    store_dataset,
    update_dataset,
)
from kstore.errors import KstoreError
from kstore.io.s3 import S3Store
from kstore.io.store import Store, StoreLike, open_store
from kstore.lifecycle import (
    build_indices,
    compact,
    copy_dataset,
    delete_dataset,
    delete_rows,
    diff,
    drop_indices,
    garbage_collect,
    history,
    upgrade_dataset,
)

# a library logs, the application decides where to: records of "kstore.*" loggers go nowhere
# until logging is configured (https://docs.python.org/3/howto/logging.html#library-config)
_logging.getLogger("kstore").addHandler(_logging.NullHandler())

__all__ = [
    "__version__",
    "AsOf",
    "CommitOptions",
    "DatasetMetadata",
    "Diff",
    "GCResult",
    "HistoryEntry",
    "KstoreError",
    "Predicates",
    "ReadPlan",
    "Snapshot",
    "S3Store",
    "Store",
    "StoreLike",
    "WriteOptions",
    "build_indices",
    "compact",
    "copy_dataset",
    "delete_dataset",
    "delete_rows",
    "diff",
    "drop_indices",
    "garbage_collect",
    "history",
    "upgrade_dataset",
    "index_lookup",
    "iter_dataset",
    "load_metadata",
    "open_dataset",
    "open_store",
    "plan_read",
    "read_dataset",
    "read_schema",
    "read_table",
    "store_dataset",
    "update_dataset",
]
