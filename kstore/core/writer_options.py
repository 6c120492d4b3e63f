"""Parquet writer options for data files: one immutable, validated value.

:class:`WriteOptions` says how a write encodes its data files: the compression codec and
level, rows per row group, the data page size, whether to write the page index, Bloom
filters, dictionary encoding, and ``sort_by`` (clustering: rows are sorted by these
columns inside every file, so row-group and page statistics prune predicates on them).
Every driver validates it on the client (:meth:`WriteOptions.of`, then
:meth:`WriteOptions.check_columns` against the data's schema) before any file is written;
a bad value raises :class:`~kstore.errors.InvalidArgumentError` naming the option.

Options only change how files are encoded, never what they hold: kstore, kartothek 5.3 and
plateau read every combination whose codec their pyarrow has (``lz4_raw`` needs
pyarrow >= 8; the default, snappy, is read by every version).

>>> opts = WriteOptions.of({"compression": "zstd", "compression_level": 3}, sort_by=["location"])
>>> opts.sort_by, opts.parquet_kwargs()["compression"]
(('location',), 'zstd')
>>> WriteOptions.of({"row_group_size": 0})
Traceback (most recent call last):
...
kstore.errors.InvalidArgumentError: write option 'row_group_size' must be an int >= 1 and <= 67108864, got 0
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.types as pat

from kstore.errors import ColumnNotFoundError, InvalidArgumentError, UnsupportedTypeError, short_repr

__all__ = ["WriteOptions", "DEFAULT_OPTIONS", "BLOOM_FILTERS_SUPPORTED", "CODECS"]

#: codecs a data file may use (Parquet's; ``none`` writes uncompressed pages)
CODECS = ("none", "snappy", "gzip", "brotli", "zstd", "lz4", "lz4_raw")

#: the installed pyarrow writes Parquet Bloom filters (``bloom_filter_options``, pyarrow >= 20)
BLOOM_FILTERS_SUPPORTED = "bloom_filter_options" in inspect.signature(pq.ParquetWriter.__init__).parameters

_MAX_ROW_GROUP = 1 << 26  # 64 Mi rows: beyond it a row group cannot be read in parts anyway
_MAX_PAGE = 1 << 30


def _as_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidArgumentError(f"write option {name!r} must be an int >= {lo} and <= {hi}, "
                                   f"got {short_repr(value)}")
    return value


def _as_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"write option {name!r} must be True or False, got {short_repr(value)}")
    return value


def _as_names(name: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        raise InvalidArgumentError(f"write option {name!r} must be a list of column names, got {value!r} "
                                   f"(write [{value!r}])")
    try:
        out = tuple(value)
    except TypeError:
        raise InvalidArgumentError(f"write option {name!r} must be a list of column names, "
                                   f"got {short_repr(value)}") from None
    if not all(isinstance(c, str) and c for c in out):
        raise InvalidArgumentError(f"write option {name!r} must be a list of column names, got {short_repr(value)}")
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"write option {name!r} lists a column twice: {list(out)}")
    return out


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """How data files are encoded (immutable; build it with :meth:`of` to validate).

    The constructor takes the fields as keyword arguments but does not validate them;
    :meth:`of` does (every driver calls it on its ``write_options`` argument).

    Attributes
    ----------
    compression : str
        One of :data:`CODECS` (default ``snappy``).
    compression_level : int or None
        Codec-specific (zstd 1..22, gzip 1..9, brotli 0..11); None for the codec's default.
    row_group_size : int or None
        Rows per row group (None: pyarrow's default, 1 Mi rows; smaller groups let
        statistics skip more of a clustered file).
    data_page_size : int or None
        Bytes per data page (None: 1 MiB).
    write_page_index : bool
        Write column and offset indexes (page statistics for readers that use them:
        DuckDB, Spark, Trino).
    bloom_filters : tuple[str, ...]
        Columns that get a Parquet Bloom filter (only where the installed pyarrow writes
        them, :data:`BLOOM_FILTERS_SUPPORTED`).
    use_dictionary : "auto", bool or tuple[str, ...]
        ``"auto"`` (default): dictionary-encode a column where the dictionary pays. Each
        writer writes a run's largest file first, with a dictionary for every column; the
        run's other files write plain the columns whose dictionary took at least 90% of
        the plain bytes there (nearly unique values: prices, ids, timestamps), as
        parquet-mr falls back to plain. True: every column; False: none; a list: only
        those columns.
    sort_by : tuple[str, ...]
        Sort each file's rows by these columns (ascending, nulls last) and record the
        order in the row-group metadata.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> opts = kstore.WriteOptions(compression="zstd", row_group_size=10_000)
    >>> from kstore.io import MemoryStore
    >>> _ = kstore.store_dataset(MemoryStore(), "d", pd.DataFrame({"x": [2, 1]}), write_options=opts, sort_by=["x"])
    >>> WriteOptions().is_default, opts.is_default
    (True, False)
    """

    compression: str = "snappy"
    compression_level: int | None = None
    row_group_size: int | None = None
    data_page_size: int | None = None
    write_page_index: bool = False
    bloom_filters: tuple[str, ...] = ()
    use_dictionary: bool | tuple[str, ...] | Literal["auto"] = "auto"
    sort_by: tuple[str, ...] = ()

    @classmethod
    def of(cls, value: WriteOptions | Mapping[str, Any] | None = None, *,
           sort_by: str | Sequence[str] | None = None) -> WriteOptions:
        """Validated options from a :class:`WriteOptions`, a dict of its fields, or None
        (the defaults); ``sort_by`` (a driver argument) overrides the value's.

        Parameters
        ----------
        value
            A :class:`WriteOptions`, a dict of some of its fields, or None.
        sort_by
            A column or list of columns; None keeps ``value``'s.

        Returns
        -------
        WriteOptions
            The validated options (codec names lower-cased, ``"uncompressed"`` as ``"none"``,
            column lists as tuples).

        Raises
        ------
        InvalidArgumentError
            An unknown option or a value out of range; the message names the option.

        Examples
        --------
        >>> WriteOptions.of({"compression": "ZSTD", "use_dictionary": ["a"]}, sort_by="a")
        WriteOptions(compression='zstd', compression_level=None, row_group_size=None, data_page_size=None, write_page_index=False, bloom_filters=(), use_dictionary=('a',), sort_by=('a',))
        >>> WriteOptions.of({"codec": "zstd"})
        Traceback (most recent call last):
        ...
        kstore.errors.InvalidArgumentError: unknown write option(s) ['codec']; valid: [...]
        """
        if value is None:
            value = {}
        if isinstance(value, WriteOptions):
            value = {f.name: getattr(value, f.name) for f in fields(cls)}
        if not isinstance(value, Mapping):
            raise InvalidArgumentError(f"write_options must be a WriteOptions or a dict, got {type(value).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in value if k not in known)
        if unknown:
            raise InvalidArgumentError(f"unknown write option(s) {unknown}; valid: {sorted(known)}")
        raw = dict(value)
        if sort_by is not None:
            raw["sort_by"] = [sort_by] if isinstance(sort_by, str) else sort_by
        return cls._validated(raw)

    @classmethod
    def _validated(cls, raw: dict[str, Any]) -> WriteOptions:
        codec = raw.get("compression", "snappy")
        if not isinstance(codec, str) or codec.lower() not in CODECS + ("uncompressed",):
            raise InvalidArgumentError(f"write option 'compression' must be one of {list(CODECS)}, got {short_repr(codec)}")
        codec = "none" if codec.lower() == "uncompressed" else codec.lower()
        if codec != "none" and not pa.Codec.is_available(codec):
            raise InvalidArgumentError(f"write option 'compression': codec {codec!r} is not available in this pyarrow")
        level = raw.get("compression_level")
        if level is not None:
            if codec == "none" or not pa.Codec.supports_compression_level(codec):
                raise InvalidArgumentError(f"write option 'compression_level': codec {codec!r} has no levels")
            lo, hi = pa.Codec.minimum_compression_level(codec), pa.Codec.maximum_compression_level(codec)
            if codec == "zstd":
                lo = max(lo, 1)  # negative zstd levels are not portable between Parquet readers
            level = _as_int("compression_level", level, lo, hi)
        rg = raw.get("row_group_size")
        if rg is not None:
            rg = _as_int("row_group_size", rg, 1, _MAX_ROW_GROUP)
        page = raw.get("data_page_size")
        if page is not None:
            page = _as_int("data_page_size", page, 1024, _MAX_PAGE)
        page_index = _as_flag("write_page_index", raw.get("write_page_index", False))
        blooms = _as_names("bloom_filters", raw.get("bloom_filters"))
        if blooms and not BLOOM_FILTERS_SUPPORTED:
            raise InvalidArgumentError(
                f"write option 'bloom_filters': the installed pyarrow {pa.__version__} cannot write Parquet "
                "Bloom filters (pq.ParquetWriter has no bloom_filter_options; pyarrow >= 20 has)")
        use_dict = raw.get("use_dictionary", "auto")
        if not isinstance(use_dict, bool) and use_dict != "auto":
            use_dict = _as_names("use_dictionary", use_dict)
        sort = _as_names("sort_by", raw.get("sort_by"))
        return cls(compression=codec, compression_level=level, row_group_size=rg, data_page_size=page,
                   write_page_index=page_index, bloom_filters=blooms, use_dictionary=use_dict, sort_by=sort)

    @classmethod
    def from_text(cls, options: Mapping[str, str]) -> WriteOptions:
        """Options given as text (the Spark data source's ``.option(...)`` values): ints,
        ``true``/``false``, comma-separated column lists; absent or empty keys keep the
        default. Keys that are not write options are ignored (the caller checks them).

        Parameters
        ----------
        options
            Option name -> text: ints for ``compression_level``, ``row_group_size`` and
            ``data_page_size``; ``true``/``false`` for ``write_page_index`` and
            ``use_dictionary``; comma-separated names for ``bloom_filters``,
            ``use_dictionary`` and ``sort_by``.

        Returns
        -------
        WriteOptions
            The validated options (as :meth:`of` returns them).

        Raises
        ------
        InvalidArgumentError
            A value that does not parse or is out of range.

        Examples
        --------
        >>> WriteOptions.from_text({"compression": "zstd", "row_group_size": "65536", "sort_by": "a, b",
        ...                         "write_page_index": "true"}).sort_by
        ('a', 'b')
        """
        raw: dict[str, Any] = {}
        for f in fields(cls):
            text = options.get(f.name)
            if text is None or text == "":
                continue
            if f.name in ("compression_level", "row_group_size", "data_page_size"):
                try:
                    raw[f.name] = int(text)
                except ValueError:
                    raise InvalidArgumentError(f"write option {f.name!r} must be an int, got {text!r}") from None
            elif f.name in ("write_page_index", "use_dictionary") and text.strip().lower() in ("true", "false"):
                raw[f.name] = text.strip().lower() == "true"
            elif f.name == "use_dictionary" and text.strip().lower() == "auto":
                raw[f.name] = "auto"
            elif f.name in ("bloom_filters", "use_dictionary", "sort_by"):
                raw[f.name] = [c.strip() for c in text.split(",") if c.strip()]
            else:
                raw[f.name] = text
        return cls.of(raw)

    def with_sort_by(self, sort_by: Sequence[str]) -> WriteOptions:
        """A copy that sorts by ``sort_by`` instead.

        Parameters
        ----------
        sort_by
            Column names (a list, not one string; no duplicates); empty: no sorting.

        Returns
        -------
        WriteOptions
            The copy; ``self`` is unchanged.

        Raises
        ------
        InvalidArgumentError
            ``sort_by`` is not a list of distinct column names.

        Examples
        --------
        >>> opts = WriteOptions.of({"compression": "zstd"})
        >>> opts.with_sort_by(["day", "id"]).sort_by, opts.sort_by
        (('day', 'id'), ())
        """
        return replace(self, sort_by=_as_names("sort_by", sort_by))

    @property
    def is_default(self) -> bool:
        """True when every field has its default value."""
        return self == DEFAULT_OPTIONS

    def check_columns(self, schema: pa.Schema, partition_on: Sequence[str], *, dataset: str) -> None:
        """Refuse options naming columns the data lacks, partition columns (not in the
        files), or columns that cannot be sorted / filtered.

        Parameters
        ----------
        schema
            The schema of the data to write (partition columns included).
        partition_on
            The partition columns (they are not stored in the files).
        dataset
            The dataset's name, for the messages.

        Raises
        ------
        ColumnNotFoundError
            ``sort_by``, ``bloom_filters`` or ``use_dictionary`` names a column not in ``schema``.
        InvalidArgumentError
            They name a partition column.
        UnsupportedTypeError
            ``sort_by`` or ``bloom_filters`` names a nested column (list, struct, map).

        Examples
        --------
        >>> import pyarrow as pa
        >>> schema = pa.schema([("day", pa.string()), ("x", pa.int64())])
        >>> WriteOptions.of(sort_by=["x"]).check_columns(schema, ["day"], dataset="d")  # fine
        >>> WriteOptions.of(sort_by=["day"]).check_columns(schema, ["day"], dataset="d")
        Traceback (most recent call last):
        ...
        kstore.errors.InvalidArgumentError: dataset 'd': write option 'sort_by' names partition column(s) ['day'], which are not stored in the files
        """
        names = set(schema.names)
        for option, cols in (("sort_by", self.sort_by), ("bloom_filters", self.bloom_filters),
                             ("use_dictionary", self.use_dictionary if isinstance(self.use_dictionary, tuple) else ())):
            missing = [c for c in cols if c not in names]
            if missing:
                raise ColumnNotFoundError(f"dataset {dataset!r}: write option {option!r} names column(s) {missing} "
                                          f"not in the data (columns: {', '.join(schema.names)})")
            part = [c for c in cols if c in partition_on]
            if part:
                raise InvalidArgumentError(f"dataset {dataset!r}: write option {option!r} names partition column(s) "
                                           f"{part}, which are not stored in the files")
        for c in self.sort_by + self.bloom_filters:
            t = schema.field(c).type
            if pat.is_nested(t) or pat.is_dictionary(t) and pat.is_nested(t.value_type):
                option = "sort_by" if c in self.sort_by else "bloom_filters"
                raise UnsupportedTypeError(f"dataset {dataset!r}: write option {option!r}: column {c!r} has type "
                                           f"{t}, which cannot be sorted or filtered")

    def parquet_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``pq.write_table`` / ``pq.ParquetWriter`` (sorting aside).

        Returns
        -------
        dict[str, Any]
            Always ``compression``, ``write_statistics`` (True) and ``use_dictionary``; the
            other options only when they differ from pyarrow's defaults.

        Examples
        --------
        >>> WriteOptions().parquet_kwargs()
        {'compression': 'snappy', 'write_statistics': True, 'use_dictionary': True}
        >>> WriteOptions.of({"compression": "zstd", "compression_level": 5, "row_group_size": 1000}).parquet_kwargs()
        {'compression': 'zstd', 'write_statistics': True, 'use_dictionary': True, 'compression_level': 5, 'row_group_size': 1000}
        """
        kw: dict[str, Any] = {"compression": self.compression, "write_statistics": True,
                              "use_dictionary": list(self.use_dictionary) if isinstance(self.use_dictionary, tuple)
                              else self.use_dictionary is not False}  # "auto": the writer narrows it per file
        if self.compression_level is not None:
            kw["compression_level"] = self.compression_level
        if self.row_group_size is not None:
            kw["row_group_size"] = self.row_group_size
        if self.data_page_size is not None:
            kw["data_page_size"] = self.data_page_size
        if self.write_page_index:
            kw["write_page_index"] = True
        if self.bloom_filters:
            kw["bloom_filter_options"] = dict.fromkeys(self.bloom_filters, True)
        return kw


DEFAULT_OPTIONS = WriteOptions()
