"""Unit and property tests for kstore.core.serialize (metadata dicts <-> JSON / msgpack.zstd)."""

from __future__ import annotations

import json

import msgpack
import pytest
import zstandard
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kstore.core.serialize import MAX_METADATA_BYTES, dumps, loads
from kstore.errors import CorruptMetadataError, InvalidArgumentError, LimitExceededError

SETTINGS = settings(max_examples=60, deadline=None)
FORMATS = ["json", "msgpack.zstd"]

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=25,
)
DICTS = st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=8)


@SETTINGS
@given(DICTS, st.sampled_from(FORMATS))
def test_round_trip(raw, fmt):
    data = dumps(raw, fmt)
    assert isinstance(data, bytes)
    assert loads(data, fmt) == raw


def test_json_is_utf8_text_without_ascii_escapes():
    data = dumps({"k": "äö€"}, "json")
    assert "äö€".encode() in data
    assert json.loads(data.decode("utf-8")) == {"k": "äö€"}


def test_msgpack_zstd_is_a_zstd_frame_with_content_size():
    raw = {"dataset_metadata_version": 4, "dataset_uuid": "x", "partitions": {"a": {"files": {"table": "x/t/a"}}}}
    data = dumps(raw, "msgpack.zstd")
    params = zstandard.get_frame_parameters(data)
    assert params.content_size > 0  # FORMAT.md: content size in the header
    inner = zstandard.ZstdDecompressor().decompress(data)
    assert msgpack.unpackb(inner, raw=False) == raw


def test_reads_frames_without_content_size():
    raw = {"dataset_uuid": "x", "n": [1, 2, 3]}
    data = zstandard.ZstdCompressor(write_content_size=False).compress(msgpack.packb(raw, use_bin_type=True))
    assert loads(data, "msgpack.zstd") == raw


def test_reads_streamed_frames():
    raw = {"dataset_uuid": "x", "v": "y" * 10000}
    cctx = zstandard.ZstdCompressor()
    chunker = cctx.chunker(chunk_size=1024)
    packed = msgpack.packb(raw, use_bin_type=True)
    data = b"".join(list(chunker.compress(packed)) + list(chunker.finish()))
    assert loads(data, "msgpack.zstd") == raw


def test_msgpack_keeps_non_string_keys():
    raw = {"indices": {"x": {1: ["a"], 2.5: ["b"]}}}
    assert loads(dumps(raw, "msgpack.zstd"), "msgpack.zstd") == raw


@pytest.mark.parametrize("fmt", FORMATS)
def test_unknown_format(fmt):
    with pytest.raises(InvalidArgumentError):
        dumps({}, "yaml")
    with pytest.raises((InvalidArgumentError, CorruptMetadataError)):
        loads(b"{}", "yaml")


# -- corrupt inputs -----------------------------------------------------------------------

GOOD_MSGPACK = dumps({"dataset_metadata_version": 4, "dataset_uuid": "x", "p": list(range(200))}, "msgpack.zstd")


@pytest.mark.parametrize("cut", [0, 1, 4, 8, 12, len(GOOD_MSGPACK) // 2, len(GOOD_MSGPACK) - 1])
def test_truncated_zstd(cut):
    with pytest.raises(CorruptMetadataError):
        loads(GOOD_MSGPACK[:cut], "msgpack.zstd", what="dataset 'x'")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{not json",
        b"{'single': 'quotes'}",
        b'{"a": 1',
        b'{"a": 1}{}',
        b"\xff\xfe\x00",  # not utf-8
        b"\xef\xbb\xbf",  # a BOM only
    ],
)
def test_bad_json(data):
    with pytest.raises(CorruptMetadataError) as exc:
        loads(data, "json", what="dataset 'x'")
    assert "dataset 'x'" in str(exc.value)


@pytest.mark.parametrize("data", [b"[1, 2]", b'"text"', b"4", b"null", b"true"])
def test_json_non_mapping(data):
    with pytest.raises(CorruptMetadataError, match="not a mapping"):
        loads(data, "json")


@pytest.mark.parametrize("value", [[1, 2], "text", 4, None, b"bytes"])
def test_msgpack_non_mapping(value):
    data = zstandard.ZstdCompressor().compress(msgpack.packb(value, use_bin_type=True))
    with pytest.raises(CorruptMetadataError, match="not a mapping"):
        loads(data, "msgpack.zstd")


@pytest.mark.parametrize(
    "packed",
    [
        b"\xc1",  # the one never-used msgpack byte
        b"\x81\xa1a",  # a map whose value is missing
        b"\x81\xa1a\x01\x02",  # extra data
        b"\x81\x91\x01\x02",  # a map with a list as key (unhashable)
        b"\x81\x81\x01\x01\x02",  # a map with a map as key (unhashable)
        b"\x81\xa1a\xc4\x05ab",  # truncated bin
    ],
)
def test_corrupt_msgpack_in_valid_zstd(packed):
    data = zstandard.ZstdCompressor().compress(packed)
    with pytest.raises(CorruptMetadataError):
        loads(data, "msgpack.zstd")


def test_plain_msgpack_without_zstd_is_corrupt():
    with pytest.raises(CorruptMetadataError):
        loads(msgpack.packb({"a": 1}), "msgpack.zstd")


def test_json_bytes_read_as_msgpack_zstd_is_corrupt():
    with pytest.raises(CorruptMetadataError):
        loads(dumps({"a": 1}, "json"), "msgpack.zstd")


@SETTINGS
@given(st.binary(max_size=200), st.sampled_from(FORMATS))
def test_random_bytes_never_raise_anything_but_corrupt_metadata(data, fmt):
    try:
        out = loads(data, fmt)
    except CorruptMetadataError:
        return
    assert isinstance(out, dict)


@SETTINGS
@given(st.binary(max_size=200))
@example(b"\x81\x90\x00")  # {[]: 0}: an unhashable map key
def test_random_msgpack_in_zstd_never_raises_anything_but_corrupt_metadata(payload):
    data = zstandard.ZstdCompressor().compress(payload)
    try:
        out = loads(data, "msgpack.zstd")
    except CorruptMetadataError:
        return
    assert isinstance(out, dict)


@SETTINGS
@given(DICTS, st.data())
def test_truncated_msgpack_zstd_is_corrupt(raw, data):
    full = dumps(raw, "msgpack.zstd")
    cut = data.draw(st.integers(0, len(full) - 1))
    with pytest.raises(CorruptMetadataError):
        loads(full[:cut], "msgpack.zstd")


def test_decompression_limit_is_sane():
    assert MAX_METADATA_BYTES >= 64 * 1024**2


def test_ints_beyond_64_bit_are_not_silently_changed():
    # JSON keeps big ints; msgpack cannot hold them. Either round-trip the value or fail
    # loudly - never turn an int into a string behind the caller's back.
    raw = {"metadata": {"big": 2**70}}
    assert loads(dumps(raw, "json"), "json") == raw
    try:
        data = dumps(raw, "msgpack.zstd")
    except (InvalidArgumentError, OverflowError, TypeError, ValueError):
        return
    assert loads(data, "msgpack.zstd") == raw


# -- hard limits (issue #11) ----------------------------------------------------------------


def _zstd_stream(chunks, *, content_size: bool) -> bytes:
    """One zstd frame of ``chunks``; without ``content_size`` the header holds no size."""
    cobj = zstandard.ZstdCompressor(level=1, write_content_size=content_size).compressobj()
    return b"".join([*(cobj.compress(c) for c in chunks), cobj.flush()])


def _msgpack_bomb(size: int) -> list[bytes]:
    """Chunks of a valid msgpack map ``{"dataset_uuid": "aaa..."}`` whose string is ``size`` bytes."""
    head = b"\x81\xacdataset_uuid\xdb" + size.to_bytes(4, "big")
    mib = b"a" * 1024**2
    return [head] + [mib] * (size // len(mib)) + [b"a" * (size % len(mib))]


def test_decompression_bomb_without_content_size_is_refused_at_the_limit():
    from kstore.errors import LimitExceededError

    data = _zstd_stream(_msgpack_bomb(MAX_METADATA_BYTES + 1024**2), content_size=False)
    assert len(data) < 64 * 1024  # a small file ...
    with pytest.raises(LimitExceededError, match=str(MAX_METADATA_BYTES)) as exc:
        loads(data, "msgpack.zstd", what="dataset 'bomb'")  # ... never decompressed past the limit
    assert "dataset 'bomb'" in str(exc.value)
    assert isinstance(exc.value, ValueError)


def test_frame_declaring_a_size_beyond_the_limit_is_refused_before_decompressing():
    from kstore.errors import LimitExceededError

    size = MAX_METADATA_BYTES + 1
    cobj = zstandard.ZstdCompressor(level=1, write_content_size=True).compressobj(size=size)
    zeros = bytes(1024**2)
    data = b"".join(cobj.compress(zeros) for _ in range(size // len(zeros)))
    data += cobj.compress(bytes(size % len(zeros))) + cobj.flush()
    assert zstandard.get_frame_parameters(data).content_size == size
    with pytest.raises(LimitExceededError, match="dataset 'x'"):
        loads(data, "msgpack.zstd", what="dataset 'x'")


def test_json_beyond_the_size_limit_is_refused_before_parsing():
    from kstore.errors import LimitExceededError

    data = b'{"a": "' + b" " * MAX_METADATA_BYTES + b'"}'
    with pytest.raises(LimitExceededError, match="dataset 'x'"):
        loads(data, "json", what="dataset 'x'")


def test_concatenated_frames_are_all_decoded_within_the_limit():
    one = msgpack.packb({"a": 1})
    data = _zstd_stream([one[:2]], content_size=False) + _zstd_stream([one[2:]], content_size=False)
    assert loads(data, "msgpack.zstd") == {"a": 1}


@pytest.mark.parametrize("fmt", FORMATS)
def test_deeply_nested_metadata_is_a_limit_error_not_a_recursion_error(fmt):
    from kstore.errors import LimitExceededError

    if fmt == "json":
        data = b'{"metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    else:
        data = zstandard.ZstdCompressor().compress(b"\x81\xa8metadata" + b"\x91" * 100_000 + b"\xc0")
    with pytest.raises(LimitExceededError, match="nest"):
        loads(data, fmt, what="dataset 'deep'")


@pytest.mark.parametrize("fmt", FORMATS)
def test_dumping_too_deep_a_value_is_a_limit_error(fmt):
    from kstore.errors import LimitExceededError

    value: list = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(LimitExceededError, match="nest"):
        dumps({"metadata": value}, fmt)


def test_every_flipped_bit_of_msgpack_zstd_metadata_is_an_error_or_changes_nothing():
    """A history summary or msgpack main file with one bit flipped (a store or disk that damaged
    it) must never decode to other metadata (simulation seed 8100421 of damaged-derived with
    flips: a summary decoded with txn 'we' instead of 'w1'). The zstd frame's checksum makes
    every flip that changes the content a CorruptMetadataError (or, in the size the frame
    declares, a LimitExceededError: readers of derived files read around both)."""
    raw = {"dataset_uuid": "d", "versions": [{"v": i, "txn": ["w1", i], "op": "append"} for i in range(20)]}
    data = dumps(raw, "msgpack.zstd")
    silent = []
    for i in range(len(data)):
        for bit in range(8):
            bad = bytearray(data)
            bad[i] ^= 1 << bit
            try:
                got = loads(bytes(bad), "msgpack.zstd")
            except (CorruptMetadataError, LimitExceededError):
                continue
            if got != raw:
                silent.append((i, bit))
    assert not silent, f"{len(silent)} flips decoded to other metadata, e.g. {silent[:5]}"


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), JSON_VALUES | st.text(min_size=4, max_size=40)
                       | st.dictionaries(st.text(max_size=4), JSON_VALUES | st.text(min_size=4, max_size=40),
                                         max_size=4), max_size=6))
def test_long_strings_spliced_into_json_give_the_encoders_bytes(raw):
    """The encoder's bytes, whatever the strings hold (quotes, backslashes, control
    characters, non-ASCII: those are encoded, plain ones spliced), with every string of four
    characters or more taken as long."""
    import kstore.core.serialize as ser

    expected = json.dumps(raw, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ser, "_SPLICE_FROM", 4)
        assert dumps(raw, "json") == expected
    assert loads(expected, "json") == raw
