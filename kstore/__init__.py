"""kstore: tabular datasets on object stores and file systems, kartothek-format compatible.

Public API (engines live in :mod:`kstore.dask` and :mod:`kstore.spark`)::

    open_dataset, store_dataset, update_dataset, read_dataset, read_table, iter_dataset, plan_read,
    load_metadata, read_schema, index_lookup, build_indices, drop_indices, compact, delete_rows, update_rows,
    merge, restore, rename_columns, drop_columns, read_changes, history, diff, garbage_collect, delete_dataset, copy_dataset, upgrade_dataset, open_store,
    WriteOptions,
    CommitOptions,
    S3Store (``S3Store.from_options(url, storage_options)``)

Types for annotations: ``Store`` (the store protocol), ``StoreLike`` (what every ``store``
argument accepts), ``Predicates``, ``AsOf``, and the results ``DatasetMetadata``,
``ReadPlan``, ``HistoryEntry``, ``Diff``, ``GCResult``, ``MergeResult``, ``UpdateResult``.
"""

import logging as _logging
from typing import TYPE_CHECKING

from kstore._version import __version__
from kstore.errors import KstoreError

# The rest of the API is imported on first use (PEP 562 ``__getattr__`` below): ``import kstore``
# then costs no pyarrow, pandas or commit machinery, and ``kstore --help`` starts fast (issue #30).
# Type checkers and the API docs (griffe) read these imports instead.
if TYPE_CHECKING:
    from kstore.blocks.gc import GCResult
    from kstore.blocks.history import Diff, HistoryEntry
    from kstore.blocks.merge import MergeResult
    from kstore.blocks.mutate import UpdateResult
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
    from kstore.io.s3 import S3Store
    from kstore.io.store import Store, StoreLike, open_store
    from kstore.lifecycle import (
        build_indices,
        compact,
        copy_dataset,
        delete_dataset,
        delete_rows,
        diff,
        drop_columns,
        drop_indices,
        garbage_collect,
        history,
        merge,
        read_changes,
        rename_columns,
        restore,
        update_rows,
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
    "MergeResult",
    "Predicates",
    "ReadPlan",
    "Snapshot",
    "S3Store",
    "Store",
    "StoreLike",
    "UpdateResult",
    "WriteOptions",
    "build_indices",
    "compact",
    "copy_dataset",
    "delete_dataset",
    "delete_rows",
    "diff",
    "drop_columns",
    "drop_indices",
    "garbage_collect",
    "history",
    "restore",
    "rename_columns",
    "read_changes",
    "merge",
    "update_rows",
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

#: public name -> the module it is imported from on first access (the TYPE_CHECKING imports above)
_LAZY: dict[str, str] = {
    "GCResult": "kstore.blocks.gc",
    "Diff": "kstore.blocks.history",
    "HistoryEntry": "kstore.blocks.history",
    "MergeResult": "kstore.blocks.merge",
    "UpdateResult": "kstore.blocks.mutate",
    "Snapshot": "kstore.blocks.snapshot",
    "AsOf": "kstore.core.arguments",
    "CommitOptions": "kstore.core.commit_options",
    "DatasetMetadata": "kstore.core.metadata",
    "ReadPlan": "kstore.core.planning",
    "Predicates": "kstore.core.predicates",
    "WriteOptions": "kstore.core.writer_options",
    **dict.fromkeys(("index_lookup", "iter_dataset", "load_metadata", "open_dataset", "plan_read", "read_dataset",
                     "read_schema", "read_table", "store_dataset", "update_dataset"), "kstore.eager"),
    "S3Store": "kstore.io.s3",
    "Store": "kstore.io.store",
    "StoreLike": "kstore.io.store",
    "open_store": "kstore.io.store",
    **dict.fromkeys(("build_indices", "compact", "copy_dataset", "delete_dataset", "delete_rows", "diff",
                     "drop_columns", "drop_indices", "garbage_collect", "history", "merge", "read_changes",
                     "rename_columns", "restore", "update_rows",
                     "upgrade_dataset"), "kstore.lifecycle"),
}

#: subpackages an eager ``import kstore`` used to load as a side effect: ``kstore.eager.x`` after a
#: bare ``import kstore`` keeps working
_SUBMODULES = frozenset({"blocks", "core", "eager", "io", "lifecycle"})

if not TYPE_CHECKING:  # to mypy a module __getattr__ would make every misspelt kstore.name an Any

    def __getattr__(name: str) -> object:
        import importlib

        if name in _LAZY:
            value = getattr(importlib.import_module(_LAZY[name]), name)
        elif name in _SUBMODULES:
            value = importlib.import_module(f"{__name__}.{name}")
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value  # the next access is a plain lookup
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | _SUBMODULES)
